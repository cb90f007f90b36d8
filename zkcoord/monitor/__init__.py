"""Monitoring zkcoord's groups with third-party tools.

* :mod:`~zkcoord.monitor.burrow`: a Burrow 1.2 configuration that watches
  every group, whatever its offset storage mode (pure: no I/O).

The command that writes it is :mod:`zkcoord.cli.burrow_cmd`.
"""
