"""zkcoord's ZooKeeper-layout migrations, one module per version.

Installed as :mod:`zkcoord.zk.layout_migrations` (``zkcoord/zk/layout_migrations``
is a link to this directory) and applied by ``zkcoord migrate layout up``;
:mod:`zkcoord.zk.layout` finds, orders and applies them. The rules for
writing one are in ``README.md`` beside this file.
"""
