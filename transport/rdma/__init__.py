"""RDMA for the transport layer: one-sided READ/WRITE of a node's arena through pyverbs.

- ``engine``: ``RdmaEngine``, the client's ``rdma`` transfer engine (registered as ``"rdma"``);
- ``responder``: ``RdmaResponder``, the node's passive side (its arena registered once);
- ``verbs``: pyverbs imported lazily, across rdma-core releases;
- ``options``: settings of one port; ``device``: one opened port (context, PD, GID, limits);
- ``handshake``: the ``QpInfo`` exchanged over the TCP control connection;
- ``qp``: one RC QP and its CQ; ``peer``: the QPs to one node, one per call;
- ``mr``: registered regions and the remote arena's bounds; ``scratch`` (over
  ``extent_allocator``): registered bounce memory for buffers nobody registered;
- ``wr``: extents -> work requests and posting windows; ``completions``: the poller thread;
  ``wc_status``: work-completion statuses -> outcomes.

Nothing is imported here: the node importing ``responder`` does not load the engine.
"""
