package lease

// FirstPending returns how many keys wait for the next first-lease round.
func (c *Cluster) FirstPending() int {
	c.first.mu.Lock()
	defer c.first.mu.Unlock()
	return len(c.first.items)
}
