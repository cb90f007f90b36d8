"""local adapter."""
