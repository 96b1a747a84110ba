"""A triolog cluster on one machine, from a checkout: `make cluster` (``python -m triolog.devcluster``)
starts a three-node ZooKeeper ensemble (:mod:`triolog.devcluster.zookeeper`, Debian's jars and
a Java 17+ runtime: `make system-deps`) and three broker processes, each ``triolog serve`` with
a config file of its own, and stops them all on Ctrl-C or SIGTERM. No Docker.

For development and for trying failover (README's "Run a 3-broker cluster"); the broker itself
never imports this package: it only starts processes (pyproject.toml's import contracts).
"""
