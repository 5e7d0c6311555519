"""The memory node: the server side of the transport (a host cache is one too).

- ``server``: ``NodeServer``, serving a store's arena over the wire protocol (TCP or a Unix
  socket), registered in the cluster's metadata by a heartbeat;
- ``config``: ``NodeConfig``, the ``node:`` section of ``cluster.yaml``;
- ``served_store``: ``ServedStore``, the store protocol a node serves (tiers/ implements it);
- ``handshake_gate``: the one thread that authenticates every incoming socket;
- ``peer_cred``: who is at the other end of a Unix socket.

The client side (``transport.node_client``, the engines) never imports this package.
Nothing is imported here.
"""
