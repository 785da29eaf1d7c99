package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// removeHalfWrittenConsumers removes, from a JetStream store directory no server runs on,
// every consumer directory that lacks meta.inf or meta.sum, and returns them as
// "STREAM/CONSUMER".
//
// nats-server writes a consumer's meta.inf and then its meta.sum (filestore.go,
// consumerFileStore.writeConsumerMeta), so a server killed between the two — an apply
// killed while it created consumers on the embedded bus — leaves meta.inf alone. At the
// next start the server skips such a consumer ("Missing consumer checksum",
// jetstream.go) but keeps its directory, and a create of the same durable then finds
// meta.inf there and writes no meta again (fileStore.ConsumerStore: "Write our meta data
// iff does not exist"): the consumer is served from memory, an apply sees it, and every
// restart loses it anew. What such a directory holds the server never reads again, so
// removing it loses nothing, and the next create stores the consumer whole.
func removeHalfWrittenConsumers(storeDir string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(storeDir, "jetstream", "*", "streams", "*", "obs", "*"))
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, d := range dirs {
		if whole(d) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			return removed, fmt.Errorf("removing the half-written consumer %s: %w", d, err)
		}
		stream := filepath.Base(filepath.Dir(filepath.Dir(d)))
		removed = append(removed, stream+"/"+filepath.Base(d))
	}
	return removed, nil
}

// whole reports whether a consumer directory holds both its meta files (or is not a
// directory at all, which is not for this repair to judge).
func whole(dir string) bool {
	info, err := os.Stat(dir)
	if err != nil || !info.IsDir() {
		return true
	}
	for _, name := range []string{"meta.inf", "meta.sum"} {
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}
