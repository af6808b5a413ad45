"""AWS wire pieces written in-tree (small, and tested against botocore): SigV4 request signing and
the event-stream frame reader. botocore itself is needed only for the AWS credential chain."""
