package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/ledger"
)

// anchorFileName is the ledger anchor's file in the data dir, by default.
const anchorFileName = "ledger.anchor"

// anchorPath is ledger.anchor_file, or <data_dir>/ledger.anchor.
func anchorPath(fc *fileConfig, dataDir string) string {
	return firstNonEmpty(fc.Ledger.AnchorFile, filepath.Join(dataDir, anchorFileName))
}

// anchorOptions are the ledger's options for the scheduler: an anchor,
// unless its Redis is the embedded one, which every restart empties.
func (d *wiring) anchorOptions() []ledger.Option {
	if d.managed != nil && d.managed.Embedded {
		d.log.Info("no ledger anchor: the embedded Redis is ephemeral")
		return nil
	}
	return []ledger.Option{ledger.WithAnchor(anchorPath(d.fc, d.dataDir))}
}

// startAnchorKeeper keeps led's anchor, if it has one, until the daemon
// stops (after the scheduler and the API, whose appends it anchors last).
func (d *wiring) startAnchorKeeper(ctx context.Context, led *ledger.Ledger) error {
	if led.Anchor() == nil {
		return nil
	}
	k, err := ledger.NewAnchorKeeper(led, ledger.AnchorKeeperConfig{Logger: d.log})
	if err != nil {
		return err
	}
	if err := k.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, k.Stop)
	return nil
}

// ledgerCmd is `lathed ledger`: the ledger's anchor, by hand.
func ledgerCmd(o *opts, stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "ledger",
		Short: "The audit ledger's anchor outside Redis",
		Args:  cobra.NoArgs,
	}
	var reason string
	re := &cobra.Command{
		Use:   "reanchor --reason TEXT",
		Short: "Anchor the ledger at what Redis holds now, after a restore that lathe audit verify reports as a rollback",
		Long: `lathed ledger reanchor moves the ledger's anchor (ledger.anchor_file, default
<data_dir>/ledger.anchor) to the ledger as Redis holds it now. The anchor
keeps the ledger's head outside Redis, so that lathe audit verify fails
when Redis was wiped or put back to an older copy; after a restore you
made on purpose, this says so.

It checks the chain in Redis with the key first and refuses unless it is
intact; then it appends a record of kind anchor_reset (where the anchor
was, where Redis ended, and --reason), anchors that record and logs it.
Run it on each host whose scheduler keeps an anchor.

It reaches Redis as lathed does: --redis-url or redis.url, else the
managed Redis of --data-dir (that of the running lathed up, or one it
starts for the purpose).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return reanchor(c.Context(), o, reason, stdout, stderr) },
	}
	re.Flags().StringVar(&reason, "reason", "", "why the anchor moves (required), kept in the ledger")
	_ = re.MarkFlagRequired("reason")
	c.AddCommand(re)
	return c
}

// runningManagedRedis is the URL of the managed Redis of the lathed up
// running on dataDir: its socket, with the password it keeps beside it
// (managedRedisPassword).
func runningManagedRedis(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "redis")
	sock := filepath.Join(dir, "redis.sock")
	if _, err := os.Stat(sock); err != nil {
		return "", fmt.Errorf("its Redis has no socket at %s", sock)
	}
	b, err := os.ReadFile(filepath.Join(dir, "password"))
	if err != nil {
		return "", fmt.Errorf("its Redis's password: %v", err)
	}
	return "unix://:" + strings.TrimSpace(string(b)) + "@" + sock, nil
}

// reanchor is `lathed ledger reanchor`.
func reanchor(ctx context.Context, o *opts, reason string, stdout, stderr io.Writer) error {
	fc, err := loadConfig(o.configPath)
	if err != nil {
		return err
	}
	d, err := openWiring(ctx, o, stderr, firstNonEmpty(o.redisURL, fc.Redis.URL) == "")
	if busy := (*dataDirInUseError)(nil); errors.As(err, &busy) {
		// lathed up runs on this data dir: reach its Redis.
		url, uerr := runningManagedRedis(busy.Dir)
		if uerr != nil {
			return fmt.Errorf("%w; and %v: give --redis-url", err, uerr)
		}
		ro := *o
		ro.redisURL = url
		d, err = openWiring(ctx, &ro, stderr, false)
	}
	if err != nil {
		return err
	}
	defer d.close()
	if d.managed != nil && d.managed.Embedded {
		return errors.New("no redis-server on PATH: the embedded Redis is ephemeral and keeps no anchor")
	}
	path := anchorPath(d.fc, d.dataDir)
	led, err := loadLedgerKey(d.rdb, d.fc, d.dataDir, d.log, ledger.WithAnchor(path))
	if err != nil {
		return err
	}
	if led == nil {
		return errors.New("no ledger key: nothing to anchor")
	}
	from, to, rep, err := led.Reanchor(ctx, reason)
	if err != nil {
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "problem: %s\n", p.What)
		}
		return err
	}
	d.log.Warn("ledger re-anchored by hand", slog.String("anchor", path), slog.Int64("from_seq", from.Seq), slog.String("from_mac", from.MAC),
		slog.Int64("redis_seq", rep.Records), slog.Int64("seq", to.Seq), slog.String("mac", to.MAC), slog.String("reason", reason))
	fmt.Fprintf(stdout, "ledger re-anchored in %s: was record %d, Redis ended at record %d; now record %d (anchor_reset), MAC %s\n",
		path, from.Seq, rep.Records, to.Seq, to.MAC)
	return nil
}
