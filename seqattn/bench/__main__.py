import sys

from seqattn.bench import main

sys.exit(main())
