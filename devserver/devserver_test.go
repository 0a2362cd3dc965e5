package devserver_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	serverlog "go.temporal.io/server/common/log"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/devserver"
)

const taskQueue = "devserver-test"

var (
	statusKey   = temporal.NewSearchAttributeKeyKeyword("ToolgateStatus")
	searchAttrs = map[string]enumspb.IndexedValueType{"ToolgateStatus": enumspb.INDEXED_VALUE_TYPE_KEYWORD}
)

func greetWorkflow(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, greetActivity, name).Get(ctx, &out)
	return out, err
}

func greetActivity(_ context.Context, name string) (string, error) {
	return "hello, " + name, nil
}

// tagWorkflow upserts its status search attribute from inside the workflow.
func tagWorkflow(ctx workflow.Context, status string) error {
	return workflow.UpsertTypedSearchAttributes(ctx, statusKey.ValueSet(status))
}

func TestStartRequiresDataDir(t *testing.T) {
	_, err := devserver.Start(context.Background(), devserver.Options{})
	require.ErrorContains(t, err, "DataDir is required")
}

func TestStartRejectsBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = devserver.Start(context.Background(), devserver.Options{
		DataDir: t.TempDir(),
		Port:    l.Addr().(*net.TCPAddr).Port,
	})
	require.ErrorContains(t, err, "is not free")
}

func TestServerRunsWorkflowsAndSurvivesRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logger := testLogger()
	opts := devserver.Options{
		DataDir:          filepath.Join(t.TempDir(), "data"), // Start must create it
		SearchAttributes: searchAttrs,
		Logger:           logger,
	}

	srv := startServer(ctx, t, opts)
	require.Equal(t, "default", srv.Namespace())
	// The pragma took effect only if SQLite created the write-ahead log.
	require.FileExists(t, filepath.Join(opts.DataDir, "temporal.db-wal"))

	c := dial(t, srv, logger)
	w := startWorker(t, c)
	requirePartitions(ctx, t, c, 1, "a database Start creates")

	greetID := "greet-" + t.Name()
	runGreet(ctx, t, c, greetID)

	tagID := "tag-" + t.Name()
	runTagged(ctx, t, c, tagID, "done")

	// Visibility is written asynchronously: wait for both queries to settle.
	requireListed(ctx, t, c, "ToolgateStatus = 'x'", greetID)
	requireListed(ctx, t, c, "ToolgateStatus = 'done'", tagID)
	requireListed(ctx, t, c, "ToolgateStatus = 'pending'")

	// Once the forced reloads end, every service still knows the attribute
	// Start added: a start carrying it, an upsert of it and a listing by it.
	select {
	case <-srv.Settled():
	case <-ctx.Done():
		t.Fatal("the search attributes never settled")
	}
	settledID := "settled-" + t.Name()
	runTagged(ctx, t, c, settledID, "settled")
	requireListed(ctx, t, c, "ToolgateStatus = 'settled'", settledID)

	w.Stop()
	c.Close()
	oldAddr := srv.FrontendAddress()
	stopServer(t, srv)
	requirePortFree(t, oldAddr)
	requireNoSDKWorkers(t)

	// A new server on the same DataDir: the state must have survived. (In
	// this process the SQLite plugin reuses its pooled connection; see
	// TestStateSurvivesKill9 for a fresh process.)
	srv = startServer(ctx, t, opts)
	c = dial(t, srv, logger)

	desc, err := c.DescribeWorkflowExecution(ctx, greetID, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, desc.GetWorkflowExecutionInfo().GetStatus())
	requireGreeted(ctx, t, c, greetID)

	attrs, err := c.OperatorService().ListSearchAttributes(ctx,
		&operatorservice.ListSearchAttributesRequest{Namespace: srv.Namespace()})
	require.NoError(t, err)
	require.Equal(t, enumspb.INDEXED_VALUE_TYPE_KEYWORD, attrs.GetCustomAttributes()["ToolgateStatus"])
	requireListed(ctx, t, c, "ToolgateStatus = 'x'", greetID)
	requireListed(ctx, t, c, "ToolgateStatus = 'done'", tagID)
	requirePartitions(ctx, t, c, 1, "the database keeps its one partition")

	c.Close()
	stopServer(t, srv)
	requirePortFree(t, srv.FrontendAddress())

	// A database an older toolgate made has no partitions file: it keeps
	// the server's default, and workflows still run on it.
	require.NoError(t, os.Remove(filepath.Join(opts.DataDir, "task-queue-partitions")))
	srv = startServer(ctx, t, opts)
	c = dial(t, srv, logger)
	requirePartitions(ctx, t, c, 4, "a database made before the partitions file")
	w = startWorker(t, c)
	runGreet(ctx, t, c, "greet-default-partitions")
	w.Stop()
	c.Close()
	stopServer(t, srv)
	require.NoFileExists(t, filepath.Join(opts.DataDir, "task-queue-partitions"), "an existing database gets none")

	// A registered attribute cannot change type; Start must say so and
	// clean up after itself.
	opts.SearchAttributes = map[string]enumspb.IndexedValueType{"ToolgateStatus": enumspb.INDEXED_VALUE_TYPE_INT}
	_, err = devserver.Start(ctx, opts)
	require.ErrorContains(t, err, `search attribute "ToolgateStatus" is registered as`)
	requireNoSDKWorkers(t)
}

// TestStateSurvivesKill9 runs a workflow in a child process, SIGKILLs it,
// and reads the result back from a server in this process: the commit must
// have reached the file (WAL), not just a connection's cache.
func TestStateSurvivesKill9(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const id = "greet-before-kill"

	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperIDEnv+"="+id)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	waitForLine(t, stdout, helperReady)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait() // "signal: killed" is the expected outcome

	srv := startServer(ctx, t, devserver.Options{DataDir: dir, SearchAttributes: searchAttrs, Logger: testLogger()})
	defer stopServer(t, srv)
	c := dial(t, srv, testLogger())
	defer c.Close()
	requireGreeted(ctx, t, c, id)
}

const (
	helperDirEnv = "DEVSERVER_HELPER_DIR"
	helperIDEnv  = "DEVSERVER_HELPER_ID"
	helperReady  = "DEVSERVER_HELPER_READY"
)

// TestMain runs this test binary as the child of TestStateSurvivesKill9
// when the parent sets helperDirEnv, and as the tests otherwise.
func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		if err := runHelper(dir, os.Getenv(helperIDEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// runHelper runs one workflow to completion on a server in dir, announces
// it on stdout, and waits to be killed.
func runHelper(dir, id string) error {
	ctx := context.Background()
	srv, err := devserver.Start(ctx, devserver.Options{DataDir: dir, SearchAttributes: searchAttrs, Logger: testLogger()})
	if err != nil {
		return err
	}
	c, err := client.Dial(client.Options{HostPort: srv.FrontendAddress(), Namespace: srv.Namespace()})
	if err != nil {
		return err
	}
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(greetWorkflow)
	w.RegisterActivity(greetActivity)
	if err := w.Start(); err != nil {
		return err
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}, greetWorkflow, "toolgate")
	if err != nil {
		return err
	}
	if err := run.Get(ctx, nil); err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, helperReady)
	select {} // the parent kills this process
}

// waitForLine reads r until a line equals want.
func waitForLine(t *testing.T, r io.Reader, want string) {
	t.Helper()
	var seen []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if sc.Text() == want {
			return
		}
		seen = append(seen, sc.Text())
	}
	require.FailNow(t, "child exited before "+want, "scan error: %v; output:\n%s", sc.Err(), strings.Join(seen, "\n"))
}

// runGreet runs greetWorkflow as id, tagged ToolgateStatus = 'x', and
// checks its result.
func runGreet(ctx context.Context, t *testing.T, c client.Client, id string) {
	t.Helper()
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(statusKey.ValueSet("x")),
	}, greetWorkflow, "toolgate")
	require.NoError(t, err)
	requireGreeted(ctx, t, c, id)
}

// requireGreeted checks that workflow id completed with the greeting.
func requireGreeted(ctx context.Context, t *testing.T, c client.Client, id string) {
	t.Helper()
	var greeting string
	require.NoError(t, c.GetWorkflow(ctx, id, "").Get(ctx, &greeting))
	require.Equal(t, "hello, toolgate", greeting)
}

// startServer starts a server and logs how long Start took.
func startServer(ctx context.Context, t *testing.T, opts devserver.Options) *devserver.Server {
	t.Helper()
	began := time.Now()
	srv, err := devserver.Start(ctx, opts)
	require.NoError(t, err)
	t.Logf("Start took %v (frontend %s)", time.Since(began), srv.FrontendAddress())
	return srv
}

// stopServer stops a server and logs how long Stop took.
func stopServer(t *testing.T, srv *devserver.Server) {
	t.Helper()
	began := time.Now()
	require.NoError(t, srv.Stop())
	t.Logf("Stop took %v", time.Since(began))
}

func dial(t *testing.T, srv *devserver.Server, logger *zap.Logger) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  srv.FrontendAddress(),
		Namespace: srv.Namespace(),
		Logger:    serverlog.NewSdkLogger(serverlog.NewZapLogger(logger.Named("test-client"))),
	})
	require.NoError(t, err)
	return c
}

func startWorker(t *testing.T, c client.Client) worker.Worker {
	t.Helper()
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(greetWorkflow)
	w.RegisterWorkflow(tagWorkflow)
	w.RegisterActivity(greetActivity)
	require.NoError(t, w.Start())
	return w
}

// requireListed waits until query lists exactly the workflows wantIDs.
func requireListed(ctx context.Context, t *testing.T, c client.Client, query string, wantIDs ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		require.NoError(ct, err)
		var got []string
		for _, e := range resp.GetExecutions() {
			got = append(got, e.GetExecution().GetWorkflowId())
		}
		assert.ElementsMatch(ct, wantIDs, got, "query %q", query)
	}, 10*time.Second, 50*time.Millisecond)
}

// runTagged runs tagWorkflow, started with status "pending", to its end,
// where it has upserted status.
func runTagged(ctx context.Context, t *testing.T, c client.Client, id, status string) {
	t.Helper()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             taskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(statusKey.ValueSet("pending")),
	}, tagWorkflow, status)
	require.NoError(t, err)
	require.NoError(t, run.Get(ctx, nil))
}

// requirePartitions checks how many partitions the server gives a task
// queue of each type.
func requirePartitions(ctx context.Context, t *testing.T, c client.Client, want int, why string) {
	t.Helper()
	resp, err := c.WorkflowService().ListTaskQueuePartitions(ctx, &workflowservice.ListTaskQueuePartitionsRequest{
		Namespace: "default",
		TaskQueue: &taskqueuepb.TaskQueue{Name: taskQueue},
	})
	require.NoError(t, err)
	assert.Len(t, resp.GetWorkflowTaskQueuePartitions(), want, "workflow task queue: %s", why)
	assert.Len(t, resp.GetActivityTaskQueuePartitions(), want, "activity task queue: %s", why)
}

// requirePortFree proves Stop released the frontend port.
func requirePortFree(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "port still held after Stop")
	require.NoError(t, l.Close())
}

// requireNoSDKWorkers proves that no SDK worker goroutine outlives the
// stops: neither the test's worker nor the server's own system workers.
func requireNoSDKWorkers(t *testing.T) {
	t.Helper()
	const marker = "go.temporal.io/sdk/internal.(*baseWorker)"
	var stacks []byte
	require.Eventually(t, func() bool {
		stacks = make([]byte, 8<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		return !bytes.Contains(stacks, []byte(marker))
	}, 10*time.Second, 50*time.Millisecond, "SDK workers still running after Stop")
}

// testLogger sends server logs to stderr at Warn (go test shows them only
// for failing tests), or at Debug when DEVSERVER_DEBUG is set.
func testLogger() *zap.Logger {
	cfg := zap.NewDevelopmentConfig()
	cfg.DisableStacktrace = true
	cfg.Level = zap.NewAtomicLevelAt(zap.WarnLevel)
	if os.Getenv("DEVSERVER_DEBUG") != "" {
		cfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	return zap.Must(cfg.Build())
}
