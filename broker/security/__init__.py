"""Who may do what: TLS, SASL authentication, ACL authorization (Kafka's model)."""
