"""cli adapter."""
