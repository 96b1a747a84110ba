"""Security: Kafka's ACLs and authorizer (acl, acl_store) and SASL credentials and exchanges
(scram: SCRAM-SHA-256/512 and PLAIN against one user store). Pure logic and durable files: no
network, no trio; the server runs the CPU-heavy SASL steps in a worker thread."""
