"""The network side: a trio TCP server feeding the sans-IO protocol codecs, and the request handlers.

How to read it (Kafka's SocketServer, RequestChannel, KafkaApis and RequestContext, in that order):

- ``app.py``: BrokerServer: storage startup, the listeners and accept loops (connection limits),
  the background tasks, graceful shutdown; builds the handler and one connection per client.
- ``connection.py``: ClientConnection: one client's bytes (frames, request memory pool, time
  limits, TLS, sendfile) and the one request pipeline every listener's requests go through
  (SASL state, quotas and throttling, long polls and hang-ups, acks=0, metrics, failures).
- ``codec.py``: what a listener's codec hands the pipeline (Decoded, Refusal, EncodedResponse).
- ``msgpack_codec.py``, ``kafka_codec.py``: the two listeners, each reduced to its codec (sans I/O;
  the Kafka one wraps the adapters of protocol/kafka); where they differ on purpose, they say so.
- ``request_context.py``: RequestContext: who asks what, from where, on which listener; passed to
  every handler, with the request's RequestAccounting (time parked, throttle).
- ``handlers.py``: RequestHandler (KafkaApis): the API table and the log and topic APIs.
- ``group_handlers.py``: GroupApis (the group APIs) and GroupService (the coordinator in the broker).
- ``security_handlers.py``: SecurityApis: ACLs, client quotas, SCRAM users.
- ``producer_handlers.py``: ProducerIdApis: init_producer_id and the produce path's producer-id check.
- ``authorization.py``: RequestAuthorizer: Kafka's ACL checks per API, for a context's principal.
- ``error_mapping.py``: the one exception -> error code mapping.
- ``quota_manager.py``: byte-rate and request-time quotas (ClientQuotaManager).
- ``loop_hold.py``: how long an inline request held the event loop, and when inline serving pauses.
- ``fetch_descriptors.py``: FetchResult and the bounds on the segment descriptors it holds.
- ``memory_pool.py``: queued.max.request.bytes. ``notifier.py``: wakes long polls on appends.
  ``group_commit.py``: one fsync for every acks=all produce waiting. ``tls_session.py``: TLS in
  memory buffers. ``wrong_protocol.py``: clients speaking another protocol, recognised and logged.
"""
