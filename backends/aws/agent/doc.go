// Package agent is the part of Lathe that runs on a rented cloud instance
// (`lathed agent --job s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json`, started
// by the instance's user-data). [Run] fetches the attempt's job, stages its
// datasets and its last checkpoint from S3, runs the trainer with the same
// runner as the local worker (internal/trainer, docs/trainer.md),
// streams what the trainer reports back to S3, watches the instance metadata
// service for a spot interruption, writes a final status object and shuts
// the instance down.
//
// # S3 layout
//
// Everything of one attempt lives under one attempt prefix,
// s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/ (ATTEMPT in decimal, no padding), and
// the checkpoints of all attempts of a job under s3://BUCKET/PREFIX/JOB_ID/checkpoints/:
//
//	PREFIX/JOB_ID/ATTEMPT/job.json         written by the worker before the launch: [Job]
//	PREFIX/JOB_ID/ATTEMPT/events/000001.jsonl
//	PREFIX/JOB_ID/ATTEMPT/events/000002.jsonl …
//	                                       batches of [EventLine], one JSON object a line,
//	                                       numbered from 1, six digits (more digits past 999999),
//	                                       each object written once and never rewritten
//	PREFIX/JOB_ID/ATTEMPT/artifacts/NAME   the trainer's artifacts (plain file names), each
//	                                       checked against the size and sha256 the trainer
//	                                       reported in its artifact event
//	PREFIX/JOB_ID/ATTEMPT/status.json      [Status], written last, on every path the agent
//	                                       survives; its presence means the attempt is over
//	PREFIX/JOB_ID/checkpoints/ckpt-N/…     (Job.CheckpointPrefix) the trainer's checkpoint
//	                                       folders as found in LATHE_CHECKPOINT_DIR;
//	                                       trainer_state.json of a folder is uploaded last,
//	                                       so a folder without it is incomplete
//
// Each events line is {"t":UNIX_MS,"type":TYPE,"data":{…}} where TYPE is
// progress, eval, checkpoint, artifact or done (data: the trainer's JSON line
// as printed) or log (data: {"stream":"stdout|stderr|agent","line":"…"}; the
// agent's own notes use stream "agent", and an event line of a kind the
// contract does not define arrives as a stdout log line). A batch is cut
// every Config.EventBatchLines lines or every Config.EventFlushInterval,
// whichever comes first.
//
// Before the trainer starts, the newest complete checkpoint folder under
// the checkpoint prefix (by its trailing step number; complete: it holds
// trainer_state.json) is downloaded into LATHE_CHECKPOINT_DIR, and the
// trainer resumes from it; when no folder is complete, everything under the
// prefix is downloaded. Each checkpoint the trainer reports is uploaded while it
// runs, and every folder of LATHE_CHECKPOINT_DIR not yet uploaded (names
// starting with "." left out) is uploaded after the trainer has exited (after a SIGTERM, this is the one it
// saved on the way out). Checkpoint folders the trainer deletes locally are
// not deleted from S3.
//
// # Endings
//
// [Status.State] is succeeded (exit 0 and every artifact uploaded), failed
// (any other exit, exit_code 3 meaning permanent; an artifact that does not
// match its report; a setup failure such as a missing dataset, exit_code -1),
// preempted (a spot
// interruption notice, or the agent itself stopped before the trainer ended:
// the trainer got SIGTERM and its checkpoint was uploaded) or timeout (the
// job's max_runtime_s passed). The instance is then shut down through
// Config.Shutdown. A guard calls it by itself max_runtime_s plus
// Config.ShutdownMargin after the trainer's start if the attempt is stuck,
// having first written a status.json of its own (timeout, exit_code -1); a
// status written by the end of Run replaces it, never the reverse.
package agent
