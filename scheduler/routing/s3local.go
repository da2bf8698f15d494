package routing

import "strings"

// RefuseLocalS3 refuses a decision that would run a job with s3:// data
// (dataset, eval dataset or output among uris) on a local pool: residency
// may allow it (the bucket's site carries the tags), but staging s3 data
// onto local workers is not built yet. A job routed to a cloud
// backend keeps its decision. The scheduler (submit, batch, explain) and
// `lathe route --explain --config` apply it after Decide, so all agree.
func RefuseLocalS3(d Decision, cfg Config, uris ...string) Decision {
	if d.Refused || d.Backend == "" {
		return d
	}
	if b, ok := cfg.Backend(d.Backend); !ok || b.Kind != KindLocal {
		return d
	}
	for _, u := range uris {
		if strings.HasPrefix(u, "s3://") {
			d.Reasons = append(d.Reasons, d.Backend+": "+u+": reading or writing s3:// on the local pool needs staging S3 onto local workers, which is not built yet; use file:// data for local jobs")
			d.Refused, d.Waiting, d.Backend, d.Site = true, false, "", ""
			return d
		}
	}
	return d
}
