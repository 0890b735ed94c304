"""The scale-out wing: several ranks or nodes feeding one job (ranks and their shards, the
shared page cache, Ray on one host and across test nodes).

Nothing is imported here: each module is imported by its own name."""
