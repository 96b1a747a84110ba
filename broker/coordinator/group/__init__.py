"""Kafka's classic consumer-group coordinator: group state, the coordinator's decisions, and the records of __consumer_offsets."""
