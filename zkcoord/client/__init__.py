"""client adapter."""
