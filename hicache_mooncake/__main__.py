import sys

from hicache_mooncake.cli import main

sys.exit(main())
