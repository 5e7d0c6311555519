"""What speaks SGLang's interface besides the backend's v1 calls: its version check, its host pools
(``host_pools``: which bytes a page is), zero-copy views of them, the v2 calls of hybrid models,
head groups across TP sizes, and the check of SGLang's running settings against the YAML."""
