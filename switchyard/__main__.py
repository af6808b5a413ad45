import sys

from switchyard.http.cli import main

sys.exit(main())
