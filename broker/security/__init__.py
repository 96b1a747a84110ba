"""Who may do what, in Kafka's model: TLS (tls), SASL credentials and exchanges (scram:
SCRAM-SHA-256/512 and PLAIN against one user store), ACLs and the authorizer (acl, acl_store).
No network and no trio here: the server runs the CPU-heavy SASL steps in a worker thread."""
