"""migrate adapter."""
