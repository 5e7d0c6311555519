"""The presets (``default``, ``cluster``, ``mooncake``) and the host cache's systemd unit, shipped as
package data (``hicache-mooncake config path NAME`` prints where)."""
