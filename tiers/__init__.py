"""The tiers and the store: the tier contract (``tier``), DRAM, SSD, remote pool and host cache
tiers, and ``TieredStore``, which puts them in one order under one placement (``policy``)."""
