package devserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/toolgate/toolgate/fsmode"
)

// partitionsFileName is the file beside temporal.db that records how many
// partitions each task queue of that database has.
const partitionsFileName = "task-queue-partitions"

// onePartition is the task-queue partitions of a database Start creates.
//
// The server's default is four partitions per task queue, made for many
// matching hosts. Here one process serves every store through one SQLite
// connection, and each worker has the SDK's two pollers per queue: with
// four, one queue stalled for a minute at random in the benchmarks; with
// one, none did (docs/benchmarks.md).
const onePartition = 1

// taskQueuePartitions returns the task-queue partitions of the SQLite
// database at dbPath, 0 meaning the server's default. A database Start
// creates (fresh) gets one, recorded in the partitions file beside it; an
// existing one keeps what its file records, or the default when it has
// none (made by an older toolgate): fewer read partitions than a database
// was written with would strand the tasks in the others.
func taskQueuePartitions(log *zap.Logger, dbPath string, fresh bool) (int, error) {
	path := filepath.Join(filepath.Dir(dbPath), partitionsFileName)
	if fresh {
		err := os.WriteFile(path, []byte(strconv.Itoa(onePartition)+"\n"), fsmode.File)
		if err == nil {
			// WriteFile keeps the mode of a file left from a database
			// that was deleted.
			_, err = fsmode.Tighten(log, path, fsmode.File)
		}
		if err != nil {
			return 0, fmt.Errorf("devserver: record the task-queue partitions: %w", err)
		}
		return onePartition, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("devserver: read the task-queue partitions: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("devserver: %s holds %q, not a number of partitions (1 or more); "+
			"it must stay as the database was made", partitionsFileName, strings.TrimSpace(string(data)))
	}
	return n, nil
}
