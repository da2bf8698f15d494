// Package routecfg is the routing config: its types (Config, Site, Backend,
// the backend kinds…), ParseConfig and its limits, the validation rules,
// Config.Hash, and the Index that routing.Decide reads.
//
// ParseConfig reads the routing sections of lathed's config file (sites,
// redis_site, backends, datasets, routing, budgets; every other top-level
// key is ignored here) strictly: unknown keys, wrong types, bad tags,
// dangling site and bucket references, an aws backend with no instance
// types, negative prices, a TCO that fails cost.TCO.Validate, both a flat
// and a TCO price, a checkpoint_uri that is neither file:// nor s3://, or
// whose bucket is not in datasets.buckets — every problem at once, each at
// its dotted path with the value as written (*ConfigError). A file with no
// sites is the implicit config: one site "local" tagged [onprem], holding
// one unpriced local backend "local", Redis and file:// data — a deployment
// without routing config routes every job to its own workers, as before.
// ParseConfig also precomputes what routing.Decide needs (tag sets as bitmasks,
// instance types by price, bucket sites) and Config.Hash, the sha256 of the
// canonical encoding that the ledger records. Package routing (the
// decisions) imports routecfg; routecfg does not import routing.
package routecfg
