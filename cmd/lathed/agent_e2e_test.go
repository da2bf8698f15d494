package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/backends/aws/imdsfake"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/mototest"
)

// TestAgentCommand: `lathed agent` as a cloud instance's user-data would
// run it, as a local process in the instance's role, against moto_server
// (an emulator of S3) and the fake IMDS: the real reference trainer runs on
// the job and dataset from S3, and status.json says succeeded with the
// adapter among the artifacts. (aws_e2e_test.go runs it under the AWS
// worker.)
func TestAgentCommand(t *testing.T) {
	requireTorch(t)
	lathed, _ := binaries(t)
	ctx := t.Context()
	moto := mototest.Start(t)
	client := s3.NewFromConfig(moto.Config(ctx), mototest.S3PathStyle)
	const bucket = "lathe-e2e"
	mototest.Bucket(ctx, t, client, bucket)
	put := func(key string, data []byte) {
		if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	root := repoRoot(t)
	for key, src := range map[string]string{"data/train.jsonl": "tiny-train.jsonl", "data/eval.jsonl": "tiny-eval.jsonl"} {
		b, err := os.ReadFile(filepath.Join(root, "configs/examples/data", src))
		if err != nil {
			t.Fatal(err)
		}
		put(key, b)
	}
	job := agent.Job{JobID: "j-e2e", Attempt: 1,
		Spec: jobspec.Spec{Name: "agent-e2e", BaseModel: "tiny-char", Dataset: "s3://" + bucket + "/data/train.jsonl",
			EvalDataset: "s3://" + bucket + "/data/eval.jsonl",
			LoRA:        jobspec.LoRA{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj"}},
			Training:    jobspec.Training{MaxSteps: 6, BatchSize: 8, LearningRate: 0.02, Seed: 42, CheckpointEvery: 2, EvalEvery: 3},
			Residency:   []string{"eu"}, Priority: jobspec.PriorityNormal, Trainer: "reference"},
		Dataset: "s3://" + bucket + "/data/train.jsonl", EvalDataset: "s3://" + bucket + "/data/eval.jsonl",
		CheckpointPrefix: "s3://" + bucket + "/runs/j-e2e/checkpoints/", MaxRuntimeS: 600}
	jb, _ := json.Marshal(job)
	put("runs/j-e2e/1/job.json", jb)
	imds := imdsfake.New()
	t.Cleanup(imds.Close)

	cmd := exec.Command(lathed, "agent", "--job", "s3://"+bucket+"/runs/j-e2e/1/job.json", "--endpoint-url", moto.URL(),
		"--imds-endpoint", imds.URL(), "--no-shutdown", "--work-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION="+mototest.Region,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lathed agent: %v\n%s", err, out)
	}
	obj, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("runs/j-e2e/1/status.json")})
	if err != nil {
		t.Fatalf("status.json: %v\n%s", err, out)
	}
	defer obj.Body.Close()
	var st agent.Status
	if err := json.NewDecoder(obj.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, a := range st.Artifacts {
		names = append(names, a.Name)
	}
	if st.State != agent.StateSucceeded || !strings.Contains(strings.Join(names, ","), "adapter_model.safetensors") {
		t.Fatalf("status %+v\n%s", st, out)
	}
}
