package routing

// Reasons a backend is infeasible for a job: Candidate.Reason starts with
// one of them, then ": " and the details. Match with strings.HasPrefix.
const (
	// ReasonComputeSite: the backend's site lacks a tag of the job.
	ReasonComputeSite = "compute site lacks a residency tag"
	// ReasonDatasetSite: the dataset's site lacks a tag.
	ReasonDatasetSite = "dataset site lacks a residency tag"
	// ReasonEvalDatasetSite: the eval dataset's site lacks a tag.
	ReasonEvalDatasetSite = "eval dataset site lacks a residency tag"
	// ReasonCheckpointSite: the site of the backend's checkpoint_uri lacks
	// a tag.
	ReasonCheckpointSite = "checkpoint site lacks a residency tag"
	// ReasonOutputSite: the output's site lacks a tag.
	ReasonOutputSite = "output site lacks a residency tag"
	// ReasonLogSite: raw log lines stream into Redis, so redis_site must
	// carry every tag of the job.
	ReasonLogSite = "raw logs go to the Redis site, which lacks a tag"
	// ReasonBucketUnknown: a URI names a bucket datasets.buckets does not
	// list; its site is not guessed.
	ReasonBucketUnknown = "bucket not listed in datasets.buckets"
	// ReasonNoSite: a URI has no known site: neither file:// nor s3://, or
	// file:// with no datasets.file_site.
	ReasonNoSite = "URI has no known site"
	// ReasonLocalS3: the job reads or writes s3:// and the backend is a
	// local pool, which uses file:// only (staging S3 onto local workers is
	// not built yet).
	ReasonLocalS3 = "the local pool cannot use s3:// data"
	// ReasonCloudTrainer: the job names a trainer other than the reference
	// one and the backend is a cloud backend, whose agent runs only the
	// reference trainer (named trainers on instances are not built yet).
	ReasonCloudTrainer = "cloud instances run only the reference trainer"
	// ReasonNoGPUFit: no node of the pool, or no instance type, has the
	// GPUs asked for (count, memory, model).
	ReasonNoGPUFit = "GPU request does not fit"
	// ReasonJobBudget: the estimated cost exceeds the job's budget_usd.
	ReasonJobBudget = "over the job's budget"
	// ReasonTeamBudget: the estimated cost exceeds what is left of the
	// team's monthly budget.
	ReasonTeamBudget = "over the team's monthly budget"
	// ReasonBackendBudget: the estimated cost exceeds what is left of the
	// cloud backend's monthly budget.
	ReasonBackendBudget = "over the backend's monthly budget"
	// ReasonConfigInvalid: the Config given to Decide (built in Go, not by
	// ParseConfig) is invalid; every job is refused.
	ReasonConfigInvalid = "routing config invalid"
)
