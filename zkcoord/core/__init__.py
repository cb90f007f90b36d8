"""The pure core: group state machine, offset rules and migration decisions.

Nothing here does I/O or reads the clock; the current time is passed in as
``now_ms``. ``tests/unit/test_core_purity.py`` enforces that this package
imports nothing from the adapters (kazoo, kafka, asyncio, click, rich, time).
"""
