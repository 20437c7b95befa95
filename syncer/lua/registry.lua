-- The registry of live nodes: a sorted set of node names scored by the
-- Redis time of each one's last round. A node is live while its last round
-- is at most `live` old; the count sizes the cold-start allowance, the
-- shares reserved for nodes yet to ask for a new key, and the failure
-- policy's division of a limit.
--
-- KEYS[1] the registry. ARGV: [1] now ('' for Redis's clock), [2] node,
-- [3] liveness (us), [4] 1: the node leaves (Shutdown).
-- Returns {now, live nodes}.
local now = clock(ARGV[1])
local k, node, live = KEYS[1], ARGV[2], tonumber(ARGV[3])
if ARGV[4] == '1' then
  redis.call('ZREM', k, node)
else
  redis.call('ZADD', k, now, node)
end
redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. fmt(now - live))
expire(k, live)
return {now, redis.call('ZCARD', k)}
