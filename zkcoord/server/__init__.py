"""server adapter."""
