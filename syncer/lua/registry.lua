-- The registry of live nodes: a sorted set of node names scored by the
-- Redis time of each one's last round (ahead of it for an idle node, whose
-- next round is that much later). A node is live while its score is at
-- most `live` old; the count sizes the cold-start allowance, the shares
-- reserved for nodes yet to ask for a new key, and the failure policy's
-- division of a limit.
--
-- KEYS[1] the registry, KEYS[2] (optional, for the rules of global reach)
-- the regions as the global store counts them, which the region's
-- exchanger writes (region.go). ARGV: [1] now ('' for Redis's clock), [2]
-- node, [3] liveness (us), [4] 1: the node leaves (Shutdown), [5] how far
-- ahead of now to score the node (us; absent: 0).
-- Returns {now, live nodes}, and the regions (0: unknown) with KEYS[2].
local now = clock(ARGV[1])
local k, node, live, ahead = KEYS[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5] or '0')
if ARGV[4] == '1' then
  redis.call('ZREM', k, node)
else
  redis.call('ZADD', k, now + ahead, node)
end
redis.call('ZREMRANGEBYSCORE', k, '-inf', '(' .. fmt(now - live))
expire(k, live + ahead)
if KEYS[2] then
  return {now, redis.call('ZCARD', k), tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
end
return {now, redis.call('ZCARD', k)}
