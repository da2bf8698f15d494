package agent

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// completeMarker is the file the reference trainer writes last in a
// checkpoint folder; the agent uploads it last.
const completeMarker = "trainer_state.json"

// checkpoints mirrors LATHE_CHECKPOINT_DIR's folders to the checkpoint
// prefix: restore before the start, upload as the trainer reports them, and
// a last sync after it exits.
type checkpoints struct {
	st     ObjectStore
	bucket string
	prefix string // key prefix, ending in "/"
	dir    string
	log    *slog.Logger
	notes  func(string)

	mu       sync.Mutex
	queue    []string
	uploaded map[string]bool
	latest   string
	kick     chan struct{}
	stop     chan struct{}
	stopped  chan struct{}
}

func newCheckpoints(st ObjectStore, prefix S3URI, dir string, log *slog.Logger, notes func(string)) *checkpoints {
	return &checkpoints{st: st, bucket: prefix.Bucket, prefix: prefix.Key, dir: dir, log: log, notes: notes,
		uploaded: map[string]bool{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

// restore downloads the checkpoints under the prefix into dir and returns
// the folders it downloaded. When some folder holds the complete marker
// (trainer_state.json), only the newest such folder (by its trailing step
// number) is downloaded: S3 keeps every checkpoint of the job, the trainer
// needs one. Otherwise everything under the prefix is.
func (c *checkpoints) restore(ctx context.Context) ([]string, error) {
	keys, err := c.st.List(ctx, c.bucket, c.prefix)
	if err != nil {
		return nil, err
	}
	newest := ""
	for _, k := range keys {
		rel := strings.TrimPrefix(k, c.prefix)
		top, rest, _ := strings.Cut(rel, "/")
		if rest == completeMarker && (newest == "" || stepOf(top) > stepOf(newest)) {
			newest = top
		}
	}
	folders := map[string]bool{}
	for _, k := range keys {
		rel := strings.TrimPrefix(k, c.prefix)
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue // a folder marker
		}
		if !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("checkpoint key %q leaves the checkpoint folder", k)
		}
		top, _, _ := strings.Cut(rel, "/")
		if newest != "" && top != newest {
			continue
		}
		err := retry(ctx, 3, func(ctx context.Context) error {
			_, err := Download(ctx, c.st, c.bucket, k, filepath.Join(c.dir, filepath.FromSlash(rel)))
			return err
		})
		if err != nil {
			return nil, err
		}
		folders[top] = true
	}
	out := make([]string, 0, len(folders))
	c.mu.Lock()
	for f := range folders {
		c.uploaded[f] = true // it is in S3 already
		c.setLatest(f)
		out = append(out, f)
	}
	c.mu.Unlock()
	sort.Strings(out)
	return out, nil
}

// report queues a folder the trainer reported (path relative to dir).
func (c *checkpoints) report(path string) {
	if !filepath.IsLocal(path) || path == "." {
		c.log.Warn("checkpoint path outside LATHE_CHECKPOINT_DIR ignored", slog.String("path", path))
		return
	}
	c.mu.Lock()
	c.queue = append(c.queue, filepath.ToSlash(filepath.Clean(path)))
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// loop uploads reported folders until finish.
func (c *checkpoints) loop(ctx context.Context) {
	defer close(c.stopped)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		c.drain(ctx)
	}
}

// drain uploads the queued folders; a failed one stays queued.
func (c *checkpoints) drain(ctx context.Context) error {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return nil
		}
		name := c.queue[0]
		c.mu.Unlock()
		if err := c.uploadFolder(ctx, name); err != nil {
			c.log.Warn("checkpoint upload failed", slog.String("checkpoint", name), slog.Any("error", err))
			return err
		}
		c.mu.Lock()
		c.queue = c.queue[1:]
		c.uploaded[name] = true
		c.setLatest(name)
		c.mu.Unlock()
	}
}

// finish stops the loop, then uploads what is queued and every folder in
// dir not uploaded yet (the checkpoint saved after a SIGTERM), trying a few
// times.
func (c *checkpoints) finish(ctx context.Context) error {
	close(c.stop)
	<-c.stopped
	entries, err := os.ReadDir(c.dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	c.mu.Lock()
	queued := map[string]bool{}
	for _, q := range c.queue {
		queued[q] = true
	}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() && !strings.HasPrefix(n, ".") && !c.uploaded[n] && !queued[n] {
			c.queue = append(c.queue, n)
		}
	}
	c.mu.Unlock()
	return retry(ctx, 3, c.drain)
}

// uploadFolder puts every file of dir/name, the complete marker last. A
// folder the trainer deleted meanwhile (it keeps only the newest few) is
// skipped.
func (c *checkpoints) uploadFolder(ctx context.Context, name string) error {
	root := filepath.Join(c.dir, filepath.FromSlash(name))
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if os.IsNotExist(err) {
		c.log.Info("checkpoint gone before its upload (the trainer pruned it)", slog.String("checkpoint", name))
		return nil
	}
	if err != nil {
		return err
	}
	sort.SliceStable(files, func(i, j int) bool {
		return filepath.Base(files[i]) != completeMarker && filepath.Base(files[j]) == completeMarker
	})
	var total int64
	for _, f := range files {
		rel, _ := filepath.Rel(c.dir, f)
		n, err := UploadFile(ctx, c.st, c.bucket, c.prefix+filepath.ToSlash(rel), f)
		if os.IsNotExist(err) {
			c.log.Info("checkpoint gone during its upload (the trainer pruned it)", slog.String("checkpoint", name))
			return nil
		}
		if err != nil {
			return err
		}
		total += n
	}
	c.log.Info("checkpoint uploaded", slog.String("checkpoint", name), slog.Int("files", len(files)), slog.Int64("bytes", total))
	c.notes(fmt.Sprintf("checkpoint %s uploaded to s3://%s/%s%s/ (%d files, %d bytes)", name, c.bucket, c.prefix, name, len(files), total))
	return nil
}

// setLatest keeps the folder with the highest trailing number; c.mu held.
func (c *checkpoints) setLatest(name string) {
	if c.latest == "" || stepOf(name) >= stepOf(c.latest) {
		c.latest = name
	}
}

// newest is the newest checkpoint in S3, by its trailing step number.
func (c *checkpoints) newest() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest
}

func stepOf(name string) int {
	i := strings.LastIndexFunc(name, func(r rune) bool { return r < '0' || r > '9' })
	n, _ := strconv.Atoi(name[i+1:])
	return n
}
