"""zk adapter."""
