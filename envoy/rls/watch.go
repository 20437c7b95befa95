package rls

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/dirwatch"
)

// WatchConfig configures Watch. The zero value is ready to use: every
// field documents its default.
type WatchConfig struct {
	// PollInterval is how often the files are read whatever the file
	// system's events say: the backstop for a lost event. Default 2s.
	PollInterval time.Duration
	// Debounce is how long the files must stay quiet after an event
	// before they are read, so an editor's several writes make one
	// reload. Default 100ms.
	Debounce time.Duration
	// Logger receives a line per rejected version. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of WatchConfig.
const (
	defaultPollInterval = 2 * time.Second
	defaultDebounce     = 100 * time.Millisecond
)

// Watcher applies the versions of a configuration path as they change,
// until Close is called or the context given to Watch ends. Its methods
// are safe for concurrent use.
type Watcher struct {
	cfg   WatchConfig
	path  string
	apply func([]*File) error
	last  [sha256.Size]byte
	// lastErr is why the last version was not applied, logged once.
	lastErr string

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// Load reads the configuration at path: the file, or every *.yaml and
// *.yml file of the directory (not its subdirectories, nor files whose
// name starts with '.'), in name order, as envoyproxy/ratelimit loads its
// runtime directory. Each file is one domain.
func Load(path string) ([]*File, error) {
	files, _, err := load(path)
	return files, err
}

func load(path string) ([]*File, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	names, err := configNames(path)
	if err != nil {
		return nil, sum, err
	}
	h := sha256.New()
	files := make([]*File, 0, len(names))
	for _, name := range names {
		data, err := readFile(name)
		if err != nil {
			return nil, sum, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
		f, err := Parse(data)
		if err != nil {
			return nil, sum, fmt.Errorf("%s: %w", name, err)
		}
		files = append(files, f)
	}
	copy(sum[:], h.Sum(nil))
	return files, sum, nil
}

// configNames lists the files Load reads at path.
func configNames(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(path, n)); err != nil || fi.IsDir() {
			continue // a dangling link or a directory
		}
		names = append(names, filepath.Join(path, n))
	}
	slices.Sort(names)
	return names, nil
}

// readFile reads name, refusing it when it is larger than a file may be.
func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%s: %w", name, fileError("", "more than the %d bytes a file may have", maxFileSize))
	}
	return data, nil
}

// Watch loads the configuration at path (see Load), hands it to apply
// (Service.Apply), and then applies each new version until ctx ends or
// Close is called. It watches the directory (path's, or path's parent
// for a file), so it sees editors that save by renaming a new file over
// the old one and Kubernetes volumes that swap a "..data" symlink; events
// are debounced, and the files are also read every PollInterval. A
// version that does not load, or that apply refuses, is logged and the
// previous one keeps serving.
//
// The first version must load: Watch returns its error, having started
// nothing. apply is called from one goroutine at a time.
func Watch(ctx context.Context, path string, apply func([]*File) error, cfg WatchConfig) (*Watcher, error) {
	if path == "" || apply == nil {
		return nil, fmt.Errorf("%w: Watch needs a path and an apply function", ErrInvalidConfig)
	}
	if cfg.PollInterval < 0 || cfg.Debounce < 0 {
		return nil, fmt.Errorf("%w: PollInterval and Debounce must not be negative", ErrInvalidConfig)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = defaultPollInterval
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = defaultDebounce
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{cfg: cfg, path: path, apply: apply}
	files, sum, err := load(path)
	if err != nil {
		return nil, err
	}
	if err := apply(files); err != nil {
		return nil, err
	}
	w.last = sum
	dir := path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	dw, err := dirwatch.New(dir)
	if err != nil {
		cfg.Logger.Warn("rls: cannot watch the configuration's directory; polling only", "path", dir, "error", err)
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.wg.Go(func() {
		dw.Run(ctx, cfg.PollInterval, cfg.Debounce, w.check, func(err error) {
			cfg.Logger.Warn("rls: watching the configuration", "path", w.path, "error", err)
		})
	})
	return w, nil
}

// check loads the configuration and applies it if it changed.
func (w *Watcher) check() {
	files, sum, err := load(w.path)
	if err == nil && sum == w.last {
		return
	}
	if err == nil {
		w.last = sum // applied or refused, this version is not tried again
		err = w.apply(files)
	}
	if err != nil {
		if err.Error() != w.lastErr {
			w.lastErr = err.Error()
			w.cfg.Logger.Error("rls: configuration rejected; the previous one keeps serving", "path", w.path, "error", err)
		}
		return
	}
	w.lastErr = ""
	w.cfg.Logger.Info("rls: configuration reloaded", "path", w.path, "domains", len(files))
}

// Close stops watching and waits for the watcher's goroutine to end. It
// is idempotent.
func (w *Watcher) Close() error {
	if w.stop != nil {
		w.stop()
	}
	w.wg.Wait()
	return nil
}
