"""Kafka's transaction coordinator: the state machine of transactional ids, its records in
``__transaction_state``, and the requests it serves (see transaction_coordinator.py)."""
