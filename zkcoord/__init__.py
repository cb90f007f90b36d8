"""zkcoord: Kafka consumer-group coordinators backed by ZooKeeper, and the
toolkit that migrates legacy ZooKeeper offsets into Kafka."""

__version__ = "0.1.0"
