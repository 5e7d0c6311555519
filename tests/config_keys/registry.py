"""Every documented configuration key (the README's reference, ``config.reference.rows()``) mapped to
the test(s) that show the key changes behaviour: set to another value, something a user can observe
is different (or, for keys SGLang owns, that SGLang reads them). ``test_key_audit.py`` keeps this
complete: a new key without an entry here fails CI with its name.

Node ids are relative to the repository root (``path::function`` or ``path::function[param]``); the
referenced test must mention the key's leaf name (its source, decorators included)."""

from __future__ import annotations

CK = "tests/config_keys"

KEY_TESTS: dict[str, list[str]] = {
    # ---- SGLang's dynamic loader and SGLang-owned keys ----------------------------------------
    "backend_name": [
        f"{CK}/test_sglang_side_keys.py::test_the_dynamic_loader_keys_choose_what_sglang_builds"
    ],
    "module_path": [f"{CK}/test_sglang_side_keys.py::test_the_dynamic_loader_keys_choose_what_sglang_builds"],
    "class_name": [f"{CK}/test_sglang_side_keys.py::test_the_dynamic_loader_keys_choose_what_sglang_builds"],
    "interface_v1": ["tests/sglang/test_backend_v1.py::test_legacy_copy_path_round_trip"],
    "prefetch_threshold": [
        f"{CK}/test_sglang_side_keys.py::test_sglang_consumes_its_own_keys_from_the_extra_config"
    ],
    "prefetch_timeout_base": [
        f"{CK}/test_sglang_side_keys.py::test_sglang_consumes_its_own_keys_from_the_extra_config"
    ],
    "prefetch_timeout_per_ki_token": [
        f"{CK}/test_sglang_side_keys.py::test_sglang_consumes_its_own_keys_from_the_extra_config"
    ],
    "hicache_storage_pass_prefix_keys": [
        "tests/sglang/test_policy_inputs.py::test_the_policy_receives_chain_parents_through_the_controller"
    ],
    "tp_lcm_size": [
        "tests/config_keys/test_sglang_side_keys.py::test_tp_lcm_size_stores_mha_pages_by_head_groups",
        "tests/sglang/test_cross_tp.py::test_mha_pages_cross_tp_sizes_both_ways_byte_exact",
    ],
    "config_file": ["tests/unit/test_config.py::test_inline_json_pointing_at_yaml_merges_inline_over_file"],
    # ---- namespace ----------------------------------------------------------------------------
    "namespace.model": [
        "tests/sglang/test_backend_v1.py::test_layouts_models_and_ranks_live_in_separate_namespaces"
    ],
    "namespace.tenant": [
        "tests/unit/test_tenant_keys.py::test_a_tenant_is_named_in_its_keys_and_salts_their_digest"
    ],
    # ---- tiers --------------------------------------------------------------------------------
    "tiers.policy": ["tests/unit/test_config.py::test_unknown_policy_is_refused_with_the_known_ones"],
    "tiers.type_aware_eviction": [
        f"{CK}/test_store_keys.py::test_type_aware_eviction_drops_a_superseded_state_before_the_oldest_page"
    ],
    "tiers.policy_options": [f"{CK}/test_store_keys.py::test_policy_options_reach_the_policy"],
    "tiers.host_cache": [
        "tests/host_cache/test_service.py::test_auto_attaches_to_a_running_service_and_off_never_does"
    ],
    "tiers.dram.enabled": ["tests/sglang/test_ssd_tier.py::test_ssd_only_configuration_stores_synchronously"],
    "tiers.dram.capacity": [f"{CK}/test_store_keys.py::test_dram_capacity_and_slab_size_shape_the_arena"],
    "tiers.dram.slab_size": [f"{CK}/test_store_keys.py::test_dram_capacity_and_slab_size_shape_the_arena"],
    "tiers.dram.prefault": [f"{CK}/test_store_keys.py::test_prefault_touches_the_arena_at_attach"],
    "tiers.dram.max_capacity": ["tests/unit/test_dram_resize.py::test_growth_past_max_capacity_is_refused"],
    # ---- tiers.remote ---------------------------------------------------------------------------
    "tiers.remote.enabled": [
        "tests/transport/test_auth_policy.py::test_the_yaml_key_reaches_the_remote_tier"
    ],
    "tiers.remote.provider": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.engine": [
        "tests/transport/test_rdma_attach.py::test_rdma_without_a_device_falls_back_to_tcp_and_says_so_once"
    ],
    "tiers.remote.rdma.device": [
        "tests/transport/test_rdma_engine.py::test_7_device_port_gid_and_route_are_configurable"
    ],
    "tiers.remote.rdma.port": [
        "tests/transport/test_rdma_engine.py::test_7_device_port_gid_and_route_are_configurable"
    ],
    "tiers.remote.rdma.gid_index": [
        "tests/transport/test_rdma_engine.py::test_7_device_port_gid_and_route_are_configurable"
    ],
    "tiers.remote.rdma.hop_limit": [
        "tests/transport/test_rdma_engine.py::test_7_device_port_gid_and_route_are_configurable"
    ],
    "tiers.remote.rdma.traffic_class": [
        "tests/transport/test_rdma_engine.py::test_7_device_port_gid_and_route_are_configurable"
    ],
    "tiers.remote.rdma.service_level": [
        "tests/transport/test_rdma_engine.py::test_7_device_port_gid_and_route_are_configurable"
    ],
    "tiers.remote.rdma.qps_per_node": [
        "tests/transport/test_rdma_engine.py::test_5_a_completion_error_replaces_the_qp_and_the_next_call_reconnects"
    ],
    "tiers.remote.rdma.scratch_size": [
        "tests/transport/test_rdma_engine.py::test_7c_scratch_size_bounds_the_unregistered_bytes_one_call_can_bounce"
    ],
    "tiers.remote.rdma.fallback": [
        "tests/transport/test_rdma_attach.py::test_fallback_none_refuses_the_attach_with_the_reason_and_leaks_nothing"
    ],
    "tiers.remote.timeout_s": [
        "tests/mooncake/test_mooncake_cluster.py::test_master_killed_mid_storm_gives_misses_within_the_timeout_and_no_exception"
    ],
    "tiers.remote.connect_timeout_s": [
        "tests/transport/test_auth_policy.py::test_the_yaml_key_reaches_the_remote_tier"
    ],
    "tiers.remote.connections_per_peer": [
        f"{CK}/test_remote_keys.py::test_connections_per_peer_bounds_the_pool"
    ],
    "tiers.remote.write_through": [f"{CK}/test_remote_keys.py::test_write_through_and_promote_on_hit"],
    "tiers.remote.promote_on_hit": [f"{CK}/test_remote_keys.py::test_write_through_and_promote_on_hit"],
    "tiers.remote.secret_env": [
        f"{CK}/test_remote_keys.py::test_the_client_secret_comes_from_secret_env_or_secret_file"
    ],
    "tiers.remote.secret_file": [
        f"{CK}/test_remote_keys.py::test_the_client_secret_comes_from_secret_env_or_secret_file"
    ],
    "tiers.remote.allow_unauthenticated": [
        "tests/transport/test_auth_policy.py::test_the_yaml_key_reaches_the_remote_tier"
    ],
    "tiers.remote.shm_dir": [
        "tests/transport/test_local_arena_proof.py::test_local_maps_only_arenas_in_its_configured_shm_dir"
    ],
    "tiers.remote.mooncake.master": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.metadata_server": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.local_hostname": [
        f"{CK}/test_remote_keys.py::test_mooncake_keys_reach_the_client_setup"
    ],
    "tiers.remote.mooncake.protocol": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.device_names": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.segment_size": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.local_buffer_size": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.replica_num": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.put_timeout_s": [
        "tests/unit/test_pool_providers.py::test_provider_option_and_mooncake_keys_reach_the_provider"
    ],
    "tiers.remote.mooncake.get_timeout_s": [
        f"{CK}/test_remote_keys.py::test_mooncake_keys_reach_the_client_setup"
    ],
    "tiers.remote.mooncake.retry_interval_s": [
        "tests/unit/test_pool_providers.py::test_guard_answers_within_the_deadline_then_short_circuits_until_the_probe_succeeds"
    ],
    # ---- tiers.ssd ----------------------------------------------------------------------------
    "tiers.ssd.enabled": ["tests/sglang/test_ssd_tier.py::test_ssd_only_configuration_stores_synchronously"],
    "tiers.ssd.path": ["tests/ssd/test_ssd_config.py::test_a_duplicate_path_list_is_refused_with_its_key"],
    "tiers.ssd.capacity": [
        "tests/ssd/test_ssd_config.py::test_a_capacity_far_beyond_the_disk_is_accepted_with_one_warning"
    ],
    "tiers.ssd.max_capacity": ["tests/ssd/test_ssd_resize.py::test_grow_up_to_max_capacity_and_no_further"],
    "tiers.ssd.region_size": [
        "tests/ssd/test_ssd_config.py::test_a_region_size_that_cannot_work_is_refused_with_its_key"
    ],
    "tiers.ssd.min_free": [
        "tests/ssd/test_ssd_config.py::test_min_free_larger_than_the_disk_is_refused_before_anything_is_made"
    ],
    "tiers.ssd.direct_io": ["tests/ssd/test_ssd_space.py::test_enospc_on_write_with_sparse_fallback"],
    "tiers.ssd.strict": [
        "tests/ssd/test_ssd_corruption.py::test_strict_refuses_corruption_with_file_and_offset"
    ],
    "tiers.ssd.io_threads": [f"{CK}/test_store_keys.py::test_io_threads_is_the_ssd_io_depth"],
    "tiers.ssd.verify_on_recover": ["tests/ssd/test_ssd_corruption.py::test_bit_flip_and_truncation_fuzz"],
    "tiers.ssd.reinsertion_hits": ["tests/ssd/test_ssd_space.py::test_fifo_reclaim_reinsertion_and_on_evict"],
    "tiers.ssd.mode": [
        "tests/sglang/test_ssd_tier.py::test_write_through_copies_every_set_in_the_background"
    ],
    "tiers.ssd.high_watermark": [
        "tests/sglang/test_ssd_tier.py::test_write_through_copies_every_set_in_the_background"
    ],
    "tiers.ssd.low_watermark": [
        "tests/sglang/test_ssd_tier.py::test_write_through_copies_every_set_in_the_background"
    ],
    "tiers.ssd.foreground_demotion": [
        "tests/unit/test_tiered_store.py::test_a_set_that_finds_no_free_dram_waits_for_the_mover_then_succeeds"
    ],
    "tiers.ssd.flush_on_detach_s": [
        "tests/sglang/test_ssd_tier.py::test_detach_without_flush_drops_dram_pages"
    ],
    "tiers.ssd.write_budget_mbps": [
        "tests/sglang/test_ssd_tier.py::test_write_budget_drops_instead_of_blocking"
    ],
    "tiers.ssd.admit_min_hits": [
        "tests/sglang/test_ssd_tier.py::test_cold_admission_gate_keeps_unread_pages_off_the_ssd"
    ],
    "tiers.ssd.promote_min_hits": [
        f"{CK}/test_store_keys.py::test_promote_min_hits_decides_when_an_ssd_hit_returns_to_dram"
    ],
    # ---- tiers.warm ---------------------------------------------------------------------------
    "tiers.warm.enabled": ["tests/ops/test_warm_restart.py::test_without_warm_restart_dram_starts_empty"],
    "tiers.warm.interval_s": ["tests/ops/test_warm_restart.py::test_snapshots_are_taken_at_intervals"],
    "tiers.warm.max_entries": [
        "tests/ops/test_warm_restart.py::test_the_snapshot_is_bounded_and_replaced_atomically"
    ],
    "tiers.warm.rewarm_mbps": [f"{CK}/test_store_keys.py::test_rewarm_keys_reach_the_rewarm"],
    "tiers.warm.rewarm_budget_s": [f"{CK}/test_store_keys.py::test_rewarm_keys_reach_the_rewarm"],
    # ---- io -----------------------------------------------------------------------------------
    "io.timeout_s": ["tests/sglang/test_ssd_tier.py::test_a_stalled_disk_never_stalls_sglang"],
    "io.max_batch_pages": [f"{CK}/test_sglang_side_keys.py::test_max_batch_pages_bounds_a_v1_call"],
    # ---- metrics / admin / tenants / logs ------------------------------------------------------
    "metrics.port": ["tests/unit/test_metrics.py::test_every_rank_serves_on_its_own_port_from_one_base"],
    "metrics.host": [
        f"{CK}/test_metrics_host_keys.py::test_metrics_host_is_the_address_the_endpoint_listens_on"
    ],
    "metrics.discovery_dir": ["tests/unit/test_metrics.py::test_node_exports_metrics_and_healthz"],
    "admin.port": [
        "tests/ops/test_admin_endpoint.py::test_off_loopback_without_a_token_the_endpoint_does_not_start"
    ],
    "admin.host": [
        "tests/ops/test_admin_endpoint.py::test_off_loopback_without_a_token_the_endpoint_does_not_start"
    ],
    "admin.token_file": [
        "tests/ops/test_admin_endpoint.py::test_off_loopback_without_a_token_the_endpoint_does_not_start"
    ],
    "admin.token_env": [
        "tests/ops/test_admin_endpoint.py::test_off_loopback_without_a_token_the_endpoint_does_not_start"
    ],
    "admin.discovery_dir": [
        "tests/ops/test_admin_endpoint.py::test_the_token_comes_from_the_environment_and_is_never_logged"
    ],
    "admin.operation_timeout_s": [
        f"{CK}/test_sglang_side_keys.py::test_operation_timeout_s_is_the_admin_default_deadline"
    ],
    # ---- events (KV events for routers) --------------------------------------------------------
    "events.endpoint": [
        "tests/sglang/test_kv_events_backend.py::test_the_backend_publishes_what_sglang_stores_and_clears"
    ],
    "events.topic": [
        "tests/sglang/test_kv_events_backend.py::test_the_backend_publishes_what_sglang_stores_and_clears",
        "tests/unit/test_kv_events.py::test_sets_are_block_stored_under_the_hash_sglang_publishes",
    ],
    "events.replay_endpoint": [
        "tests/unit/test_kv_events.py::test_replay_returns_missed_batches_in_sglang_s_protocol"
    ],
    "events.max_queue": [
        "tests/unit/test_kv_events.py::test_a_full_queue_drops_and_counts_and_the_data_path_never_waits"
    ],
    "events.batch_max": [
        "tests/unit/test_kv_events.py::test_four_threads_of_sets_and_gets_every_stored_page_is_published"
    ],
    "events.flush_interval_s": [
        "tests/unit/test_kv_events.py::test_a_full_queue_drops_and_counts_and_the_data_path_never_waits"
    ],
    "events.dram_medium": [
        "tests/unit/test_kv_events.py::test_dram_medium_external_for_consumers_that_merge_sglang_s_own_stream"
    ],
    "tenants.shares": [
        "tests/ops/test_tenant_shares_store.py::test_a_tenant_stays_within_its_dram_share_under_load"
    ],
    "tenants.max_tenants": [
        "tests/policy/test_tenant_shares.py::test_unlisted_tenants_beyond_the_bound_are_counted_together"
    ],
    "log_level": ["tests/unit/test_logs.py::test_level_follows_the_root_logger_unless_the_yaml_sets_one"],
    # ---- host_cache ---------------------------------------------------------------------------
    "host_cache.dir": [
        f"{CK}/test_host_cache_services.py::test_name_dir_shm_dir_and_max_clients_shape_the_service"
    ],
    "host_cache.name": [
        f"{CK}/test_host_cache_services.py::test_name_dir_shm_dir_and_max_clients_shape_the_service"
    ],
    "host_cache.shm_dir": [
        f"{CK}/test_host_cache_services.py::test_name_dir_shm_dir_and_max_clients_shape_the_service"
    ],
    "host_cache.autostart": [
        "tests/host_cache/test_service.py::test_without_a_service_a_backend_serves_misses_at_once_and_attaches_when_one_appears"
    ],
    "host_cache.start_timeout_s": [
        "tests/host_cache/test_service.py::test_without_a_service_a_backend_serves_misses_at_once_and_attaches_when_one_appears"
    ],
    "host_cache.retry_interval_s": [
        f"{CK}/test_host_cache_services.py::test_retry_interval_s_is_how_soon_a_backend_restarts_a_killed_service"
    ],
    "host_cache.idle_timeout_s": [
        "tests/host_cache/test_service.py::test_it_stops_when_idle_and_removes_its_socket_and_arena"
    ],
    "host_cache.connections": [
        f"{CK}/test_host_cache_services.py::test_connections_caps_the_connections_a_backend_opens_to_the_service"
    ],
    "host_cache.max_clients": [
        f"{CK}/test_host_cache_services.py::test_name_dir_shm_dir_and_max_clients_shape_the_service"
    ],
    "host_cache.metrics_port": [
        "tests/host_cache/test_service.py::test_per_client_accounting_is_in_the_stats_and_the_metrics"
    ],
    # ---- metadata -----------------------------------------------------------------------------
    "metadata.backend": ["tests/transport/test_redis_metadata.py::test_membership_and_outage"],
    "metadata.url": [
        "tests/sglang/test_attach_failures.py::test_an_unreachable_redis_at_attach_is_logged_with_its_key_and_local_tiers_keep_serving"
    ],
    "metadata.namespace": ["tests/transport/test_redis_metadata.py::test_membership_and_outage"],
    "metadata.timeout_s": ["tests/transport/test_redis_metadata.py::test_membership_and_outage"],
    "metadata.heartbeat_interval_s": [
        f"{CK}/test_node_keys.py::test_heartbeats_keep_a_node_in_the_membership"
    ],
    "metadata.heartbeat_ttl_s": [f"{CK}/test_node_keys.py::test_heartbeats_keep_a_node_in_the_membership"],
    "metadata.refresh_interval_s": [
        "tests/transport/test_conformance.py::test_pages_stored_by_one_client_found_by_another"
    ],
    "metadata.nodes": ["tests/transport/test_auth_policy.py::test_the_yaml_key_reaches_the_remote_tier"],
    # ---- node ---------------------------------------------------------------------------------
    "node.node_id": ["tests/unit/test_metrics.py::test_node_exports_metrics_and_healthz"],
    "node.host": [
        "tests/transport/test_auth_policy.py::test_a_node_beyond_loopback_refuses_to_start_without_a_secret"
    ],
    "node.port": ["tests/unit/test_cli_behaviour.py::test_node_takes_an_at_file_and_drains_on_sigterm"],
    "node.unix_socket": [f"{CK}/test_node_keys.py::test_unix_socket_replaces_the_tcp_listener"],
    "node.capacity": [f"{CK}/test_node_keys.py::test_capacity_and_slab_size_shape_the_node_arena"],
    "node.slab_size": [f"{CK}/test_node_keys.py::test_capacity_and_slab_size_shape_the_node_arena"],
    "node.shm": [
        "tests/unit/test_arena_store.py::test_a_shared_arena_is_a_proven_file_another_mapping_reads"
    ],
    "node.shm_dir": [
        "tests/transport/test_local_arena_proof.py::test_local_maps_only_arenas_in_its_configured_shm_dir"
    ],
    "node.eviction": [f"{CK}/test_node_keys.py::test_eviction_names_the_node_policy"],
    "node.secret_env": [f"{CK}/test_node_keys.py::test_the_node_secret_comes_from_secret_env_or_secret_file"],
    "node.secret_file": [
        f"{CK}/test_node_keys.py::test_the_node_secret_comes_from_secret_env_or_secret_file"
    ],
    "node.allow_unauthenticated": [
        "tests/transport/test_auth_policy.py::test_allow_unauthenticated_warns_at_every_start"
    ],
    "node.max_key_len": [f"{CK}/test_node_keys.py::test_request_limits_refuse_what_exceeds_them"],
    "node.max_batch": [f"{CK}/test_node_keys.py::test_request_limits_refuse_what_exceeds_them"],
    "node.max_meta": [f"{CK}/test_node_keys.py::test_max_meta_refuses_a_request_whose_metadata_exceeds_it"],
    "node.max_payload": [f"{CK}/test_node_keys.py::test_request_limits_refuse_what_exceeds_them"],
    "node.max_connections": [
        "tests/transport/test_flood.py::test_idle_authenticated_connections_do_not_starve_new_ones"
    ],
    "node.idle_timeout_s": [f"{CK}/test_node_keys.py::test_idle_timeout_s_closes_idle_connections"],
    "node.handshake_timeout_s": [f"{CK}/test_node_keys.py::test_handshake_timeout_s_drops_silent_sockets"],
    "node.max_handshakes": [f"{CK}/test_node_keys.py::test_handshake_bounds_drop_the_oldest_silent_socket"],
    "node.max_handshakes_per_peer": [
        f"{CK}/test_node_keys.py::test_handshake_bounds_drop_the_oldest_silent_socket"
    ],
    "node.request_timeout_s": [
        "tests/transport/test_flood.py::test_a_stalled_put_body_releases_its_space_at_the_request_deadline"
    ],
    "node.drain_timeout_s": [
        "tests/transport/test_rdma_engine.py::test_8_node_closes_rdma_connections_and_drain_closes_the_responder"
    ],
    "node.rdma_device": ["tests/transport/test_rdma_engine.py::test_a_node_without_rdma_is_reached_over_tcp"],
    "node.rdma_port": [
        "tests/transport/test_rdma_engine.py::test_7b_the_nodes_gid_index_and_port_choose_its_route_or_are_refused"
    ],
    "node.rdma_gid_index": [
        "tests/transport/test_rdma_engine.py::test_7b_the_nodes_gid_index_and_port_choose_its_route_or_are_refused"
    ],
    "node.rdma_hop_limit": [f"{CK}/test_node_keys.py::test_rdma_keys_reach_the_responder_options"],
    "node.rdma_traffic_class": [f"{CK}/test_node_keys.py::test_rdma_keys_reach_the_responder_options"],
    "node.rdma_service_level": [f"{CK}/test_node_keys.py::test_rdma_keys_reach_the_responder_options"],
    "node.ready_file": [f"{CK}/test_node_keys.py::test_ready_file_says_where_the_node_listens"],
    "node.metrics.port": ["tests/unit/test_metrics.py::test_node_exports_metrics_and_healthz"],
    "node.metrics.host": [
        f"{CK}/test_node_keys.py::test_node_metrics_host_is_the_address_the_endpoint_listens_on"
    ],
    "node.metrics.discovery_dir": ["tests/unit/test_metrics.py::test_node_exports_metrics_and_healthz"],
    # ---- sglang (read by ``hicache-mooncake launch``) -------------------------------------------
    "sglang.hicache_ratio": [
        "tests/unit/test_launch_checks.py::test_a_host_pool_no_larger_than_the_gpu_pool_is_refused"
    ],
    "sglang.hicache_size": [
        "tests/unit/test_launch_checks.py::test_a_fixed_host_pool_is_split_exactly_with_the_dram_tiers"
    ],
    "sglang.hicache_host_memory_mode": [
        "tests/unit/test_launch_checks.py::test_a_host_pool_no_larger_than_the_gpu_pool_is_refused"
    ],
    "sglang.hicache_mem_layout": [
        "tests/unit/test_launch_checks.py::test_layouts_sglang_would_rewrite_are_named"
    ],
    "sglang.hicache_io_backend": [
        "tests/unit/test_launch_checks.py::test_layouts_sglang_would_rewrite_are_named"
    ],
    "sglang.hicache_write_policy": [
        f"{CK}/test_sglang_side_keys.py::test_every_sglang_key_becomes_its_launch_flag"
    ],
    "sglang.hicache_storage_prefetch_policy": [
        f"{CK}/test_sglang_side_keys.py::test_every_sglang_key_becomes_its_launch_flag"
    ],
    "sglang.hicache_storage_prefetch_retry_poll_interval": [
        f"{CK}/test_sglang_side_keys.py::test_every_sglang_key_becomes_its_launch_flag"
    ],
    "sglang.hicache_storage_prefetch_retry_max_attempts": [
        f"{CK}/test_sglang_side_keys.py::test_every_sglang_key_becomes_its_launch_flag"
    ],
    "sglang.page_size": ["tests/unit/test_launch_checks.py::test_small_or_unset_pages_are_pointed_out"],
}
