"""The cluster: brokers coordinated through a metadata store (ZooKeeper, Kafka's layout)."""
