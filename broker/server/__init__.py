"""The network side: a trio TCP server feeding the sans-IO protocol, and the request handlers."""
