// Package dirwatch runs a check when a directory changes: on a file
// system event, once the directory has been quiet for a debounce, and on a
// poll besides, the backstop for a lost event. It watches the directory,
// not a file, so it sees editors that save by renaming a new file over the
// old one and Kubernetes volumes that swap a "..data" symlink. The rules
// files of hybrid/httplimit and the Envoy service's configuration are
// watched with it.
package dirwatch

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watcher watches one directory; New starts it and Run consumes it.
type Watcher struct {
	fw *fsnotify.Watcher // nil: polling only
}

// New watches dir. When the directory cannot be watched it returns the
// error with a Watcher that only polls: the caller logs it and runs it
// anyway.
func New(dir string) (*Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fw.Add(dir); err != nil {
			fw.Close()
		}
	}
	if err != nil {
		return &Watcher{}, err
	}
	return &Watcher{fw: fw}, nil
}

// Run calls check every poll, and debounce after the last of a burst of
// events in the directory (any change in it: the file may be reached
// through a symlink the event names, not the file itself), until ctx ends;
// watchErr gets the watcher's errors. It closes the watcher when it
// returns, and calls check and watchErr from its own goroutine only.
func (w *Watcher) Run(ctx context.Context, poll, debounce time.Duration, check func(), watchErr func(error)) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fw != nil {
		defer w.fw.Close()
		events, errs = w.fw.Events, w.fw.Errors
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			quiet.Reset(debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			watchErr(err)
		case <-quiet.C:
			check()
		case <-tick.C:
			check()
		}
	}
}
