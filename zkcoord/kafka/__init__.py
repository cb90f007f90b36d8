"""kafka-python adapters: topic metadata (and, with the migration toolkit, offsets in __consumer_offsets)."""
