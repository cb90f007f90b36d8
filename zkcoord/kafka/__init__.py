"""kafka adapter."""
