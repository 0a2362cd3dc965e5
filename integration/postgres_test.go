package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// installPostgres is how to get the PostgreSQL server binaries on Debian
// (.ci/run does it).
const installPostgres = "sudo apt-get update && sudo apt-get install -y postgresql"

// TestPostgresMultiProcess runs toolgate as docker-compose.yml lays it out,
// one process per service, on this machine: a private PostgreSQL cluster,
// the Temporal server on it (testdata/temporalpg), two `toolgate worker`
// processes sharing one workspace and one `toolgate serve`. It shows that
// both workers run calls, that a worker killed with -9 in the middle of a
// burst loses no call and runs no tool twice, that calls waiting for a
// person survive a restart of the Temporal server, and that a worker
// stopped with SIGTERM lets its running tool finish.
//
// Every shell call appends its call ID to runs.txt in the shared
// workspace, so every run of a tool is observed.
func TestPostgresMultiProcess(t *testing.T) {
	timer := newStepTimer(t)
	built := buildTemporalPG(t) // the link takes longest: overlap it with initdb
	pg := startPostgres(t)
	timer.step("PostgreSQL cluster: initdb + pg_ctl start")
	temporalBin := <-built
	require.NotEmpty(t, temporalBin, "build testdata/temporalpg failed (see above)")
	timer.step("build testdata/temporalpg (overlapped with initdb)")

	port := freePort(t)
	startTemporal := func(t *testing.T) *proc {
		return startProgram(t, temporalBin, "temporalpg ready", "-pg-port", strconv.Itoa(pg.port), "-port", strconv.Itoa(port))
	}
	temporal := startTemporal(t)
	timer.step("Temporal on PostgreSQL, first start (schema setup, namespace, search attributes)")

	d := &devEnv{t: t, port: port, workspace: filepath.Join(t.TempDir(), "workspace")}
	d.httpAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	tokens := writeTokensFile(t, t.TempDir())
	startWorker := func(t *testing.T) (*proc, string) {
		metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		return start(t, "Worker running", "worker", "--temporal-address", d.address(), "--namespace", "default",
			"--workspace", d.workspace, "--metrics", metrics), metrics
	}
	w1, w1Metrics := startWorker(t)
	w2, _ := startWorker(t)
	api := start(t, "HTTP listener running", "serve", "--temporal-address", d.address(), "--namespace", "default",
		"--http", d.httpAddr, "--tokens", tokens)
	timer.step("two workers and the API started")

	// The API clients report to the (sub)test they are used in.
	agent := func(t *testing.T) apiClient {
		return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-agent-1"}
	}
	bob := func(t *testing.T) apiClient { return apiClient{t: t, base: "http://" + d.httpAddr, token: "token-bob"} }
	c := d.client()
	runs := filepath.Join(d.workspace, "runs.txt")
	pid := func(p *proc) string { return strconv.Itoa(p.cmd.Process.Pid) }

	t.Run("the compose healthchecks pass", func(t *testing.T) {
		d := d.in(t)
		for _, url := range []string{"http://" + d.httpAddr + "/readyz", "http://" + w1Metrics + "/metrics"} {
			r := d.cli("health", "--url", url)
			assert.Equal(t, 0, r.code, "toolgate health --url %s: %s%s", url, r.stdout, r.stderr)
		}
	})

	// Shell calls through the API: submitted by the agent, approved one by
	// one by a person. Each appends its ID to runs.txt and prints $PPID:
	// the shell's parent is the worker process that ran the tool.
	shellArgs := func(id string) map[string]any {
		return map[string]any{"command": "echo " + id + " >> runs.txt; echo $PPID"}
	}
	submitShell := func(t *testing.T, session string, ids []string) {
		for _, id := range ids {
			r := agent(t).do("POST", "/v1/calls", map[string]any{"session": session, "tool": "shell", "call_id": id, "args": shellArgs(id)})
			require.Equal(t, http.StatusAccepted, r.status, r.raw)
		}
		require.Eventually(t, func() bool {
			r := bob(t).do("GET", "/v1/pending?session="+session, nil)
			calls, _ := r.body["calls"].([]any)
			return r.status == http.StatusOK && len(calls) == len(ids)
		}, 30*time.Second, 20*time.Millisecond, "the shell calls of %s never all waited for a person", session)
	}
	approve := func(t *testing.T, ids []string) {
		for _, id := range ids {
			r := bob(t).do("POST", "/v1/calls/"+id+"/decision", map[string]any{"decision": "approve"})
			require.Equal(t, http.StatusOK, r.status, r.raw)
		}
	}
	// ranIn waits for each shell call's result and returns the worker PID
	// that ran it.
	ranIn := func(t *testing.T, ids []string) map[string]string {
		pids := map[string]string{}
		for _, id := range ids {
			r := bob(t).do("GET", "/v1/calls/"+id+"?wait=90s", nil) // an approver reads every call
			require.Equal(t, http.StatusOK, r.status, r.raw)
			require.Equal(t, "ok", r.body["status"], r.raw)
			assert.Equal(t, "bob", r.body["decided_by"])
			out, _ := r.body["output"].(map[string]any)
			stdout, _ := out["stdout"].(string)
			pids[id] = strings.TrimSpace(stdout)
		}
		return pids
	}
	ids := func(prefix string, from, to int) []string {
		var s []string
		for i := from; i <= to; i++ {
			s = append(s, fmt.Sprintf("%s-%02d", prefix, i))
		}
		return s
	}

	var shellIDs []string // every shell call that must have run exactly once
	t.Run("both workers run calls", func(t *testing.T) {
		wave := ids("sh", 1, 20)
		submitShell(t, "pg-shell", wave)
		approve(t, wave)
		pids := ranIn(t, wave)
		shellIDs = append(shellIDs, wave...)
		perWorker := map[string]int{}
		for _, p := range pids {
			perWorker[p]++
		}
		t.Logf("shell calls per worker PID: %v", perWorker)
		assert.Len(t, perWorker, 2, "the calls ran in exactly the two worker processes: %v", perWorker)
		assert.Positive(t, perWorker[pid(w1)], "worker 1 ran calls: %v", perWorker)
		assert.Positive(t, perWorker[pid(w2)], "worker 2 ran calls: %v", perWorker)
		assert.Equal(t, onceEach(wave), runCounts(t, runs))
	})
	timer.step("20 shell calls approved through the API, on both workers")

	t.Run("kill -9 of a worker in the middle of a burst", func(t *testing.T) {
		d := d.in(t)
		// Shell calls waiting for a person when the worker dies, approved
		// once it is gone. (A shell call whose tool is running in the
		// killed worker would wait out its 10.5-minute attempt timeout and
		// fail: the tool runs at most once and sends no heartbeat.)
		waiting := ids("sh", 21, 30)
		submitShell(t, "pg-shell-2", waiting)

		const n, concurrency = 200, 16
		type outcome struct {
			res     workflows.Result
			err     error
			latency time.Duration
		}
		outcomes := make([]outcome, n)
		var done atomic.Int32
		next := make(chan int)
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		burst := time.Now()
		for range concurrency {
			wg.Go(func() {
				for i := range next {
					began := time.Now()
					res, err := c.Call(ctx, tgclient.CallRequest{
						Session: fmt.Sprintf("pg-echo-%d", i%10), CallID: fmt.Sprintf("echo-%03d", i), Tool: "echo",
						Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
					})
					outcomes[i] = outcome{res, err, time.Since(began)}
					done.Add(1)
				}
			})
		}
		go func() {
			defer close(next)
			for i := range n {
				select {
				case next <- i:
				case <-ctx.Done():
					return
				}
			}
		}()
		require.Eventually(t, func() bool { return done.Load() >= n/4 }, time.Minute, 5*time.Millisecond, "the burst never got going")
		w2.kill()
		killedAt, doneAtKill := time.Now(), done.Load()
		t.Logf("killed worker 2 (pid %s) with %d of %d echo calls done, %s into the burst", pid(w2), doneAtKill, n, killedAt.Sub(burst).Round(time.Millisecond))

		approve(t, waiting)
		for i := range 5 { // the CLI, too, while the burst goes on
			out := d.callJSON(0, "--session", "pg-cli", "--wait", "90s", "echo", fmt.Sprintf(`{"cli":%d}`, i))
			assert.Equal(t, "ok", out["status"])
		}
		pids := ranIn(t, waiting)
		shellIDs = append(shellIDs, waiting...)
		for id, p := range pids {
			assert.Equal(t, pid(w1), p, "%s ran in the surviving worker", id)
		}

		wg.Wait()
		var slowest time.Duration
		for i, o := range outcomes {
			if !assert.NoError(t, o.err, "echo-%03d", i) {
				continue
			}
			assert.Equal(t, workflows.StatusOK, o.res.Status, "echo-%03d: %s", i, o.res.Reason)
			assert.JSONEq(t, fmt.Sprintf(`{"i":%d}`, i), string(o.res.Output), "echo-%03d", i)
			slowest = max(slowest, o.latency)
		}
		t.Logf("all %d echo calls ok in %s; the slowest took %s (calls caught in the killed worker wait for Temporal's timeouts)",
			n, time.Since(burst).Round(time.Millisecond), slowest.Round(time.Millisecond))
		// Calls with a step running in the worker when it died show it in
		// their history: a workflow task that timed out, or a tool attempt
		// after the first. Only logged: whether the kill lands while the
		// worker executes a step (a few milliseconds per step) is chance;
		// that every call completes is what the test requires.
		caught := 0
		for i := range n {
			if retriedAfterTimeout(t, c, fmt.Sprintf("echo-%03d", i)) {
				caught++
			}
		}
		t.Logf("%d echo calls had a step running in the killed worker and finished in the other", caught)
		assert.Equal(t, onceEach(shellIDs), runCounts(t, runs), "each shell call ran exactly once")
	})
	timer.step("200 echo calls + 10 shell calls across a kill -9 of worker 2")

	// Calls waiting for a person when the Temporal server restarts.
	restartIDs := ids("rs", 1, 3)
	t.Run("calls wait for a person before the restart", func(t *testing.T) {
		d := d.in(t)
		for _, id := range restartIDs {
			args, _ := json.Marshal(shellArgs(id))
			d.callJSON(5, "--session", "pg-restart", "--id", id, "--wait", "200ms", "shell", string(args))
		}
		d.callJSON(5, "--session", "pg-restart", "--id", "rs-write", "--wait", "200ms", "write_file", `{"path":"after-restart.txt","content":"survived"}`)
		for _, id := range append(restartIDs, "rs-write") {
			d.waitPending(c, id)
		}
	})

	restarted := time.Now()
	temporal.stop()
	stopped := time.Since(restarted)
	temporal = startTemporal(t)
	t.Logf("Temporal server: SIGTERM to exit %s, start again on the same database %s",
		stopped.Round(time.Millisecond), (time.Since(restarted) - stopped).Round(time.Millisecond))

	t.Run("after the restart they are listed and can be approved", func(t *testing.T) {
		d := d.in(t)
		r := d.cli("pending", "--json", "--session", "pg-restart")
		require.Equal(t, 0, r.code, r.stderr)
		var pending []tgclient.PendingCall
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &pending))
		var listed []string
		for _, p := range pending {
			listed = append(listed, p.CallID)
		}
		assert.ElementsMatch(t, append(slices.Clone(restartIDs), "rs-write"), listed, "toolgate pending lists the calls submitted before the restart")

		// Decided through both paths: the API (the serve process and the
		// workers reconnect by themselves) and the CLI (Temporal).
		approve(t, restartIDs[:2])
		r = d.cli("approve", restartIDs[2], "--by", "bob")
		require.Equal(t, 0, r.code, r.stderr)
		r = d.cli("approve", "rs-write", "--by", "bob")
		require.Equal(t, 0, r.code, r.stderr)
		ranIn(t, restartIDs)
		shellIDs = append(shellIDs, restartIDs...)
		out := d.callJSON(0, "--session", "pg-restart", "--id", "rs-write", "--wait", "60s", "write_file", `{"path":"after-restart.txt","content":"survived"}`)
		assert.Equal(t, "bob", out["decided_by"])
		content, err := os.ReadFile(filepath.Join(d.workspace, "after-restart.txt"))
		require.NoError(t, err)
		assert.Equal(t, "survived", string(content))
		assert.Equal(t, onceEach(shellIDs), runCounts(t, runs), "each shell call ran exactly once")
		t.Logf("listed, decided and finished %s after the restart began", time.Since(restarted).Round(time.Millisecond))
	})
	timer.step("restart of the Temporal server with 4 calls waiting")

	t.Run("SIGTERM lets a running tool finish", func(t *testing.T) {
		// Worker 1 is the only worker: the tool starts there for sure.
		r := agent(t).do("POST", "/v1/calls", map[string]any{"session": "pg-term", "tool": "shell", "call_id": "term-1",
			"args": map[string]any{"command": "echo term-1 >> runs.txt; sleep 2; echo $PPID"}})
		require.Equal(t, http.StatusAccepted, r.status, r.raw)
		require.Eventually(t, func() bool {
			return agent(t).do("GET", "/v1/calls/term-1", nil).body["status"] == "pending"
		}, 30*time.Second, 20*time.Millisecond)
		approve(t, []string{"term-1"})
		require.Eventually(t, func() bool { return runCounts(t, runs)["term-1"] == 1 },
			30*time.Second, 10*time.Millisecond, "the tool never started")

		began := time.Now()
		procIn(w1, t).stop()
		t.Logf("worker 1 exited %s after SIGTERM (sent while its tool had about 2 s of sleep left)", time.Since(began).Round(time.Millisecond))
		// The tool's completion is recorded; another worker finishes the call.
		w3, _ := startWorker(t)
		pids := ranIn(t, []string{"term-1"})
		assert.Equal(t, pid(w1), pids["term-1"], "the tool ran to its end in the stopping worker")
		shellIDs = append(shellIDs, "term-1")
		assert.Equal(t, onceEach(shellIDs), runCounts(t, runs), "each shell call ran exactly once")
		w3.stop()
	})
	timer.step("SIGTERM of worker 1 during a tool run")

	began := time.Now()
	api.stop()
	temporal.stop()
	t.Logf("API and Temporal stopped cleanly on SIGTERM in %s", time.Since(began).Round(time.Millisecond))
	timer.step("clean stop")
}

// retriedAfterTimeout reports whether a call's history shows a workflow
// task that timed out or a tool attempt after the first: the marks a
// worker that died in the middle of the call leaves.
func retriedAfterTimeout(t *testing.T, c *tgclient.Client, callID string) bool {
	t.Helper()
	iter := c.Temporal().GetWorkflowHistory(context.Background(), workflows.CallWorkflowID(callID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		switch {
		case ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			return true
		case ev.GetActivityTaskStartedEventAttributes().GetAttempt() > 1:
			return true
		}
	}
	return false
}

// runCounts counts how often each line occurs in path: for runs.txt, how
// often each shell call's tool ran.
func runCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		b, err = nil, nil
	}
	require.NoError(t, err)
	counts := map[string]int{}
	for line := range strings.Lines(string(b)) {
		counts[strings.TrimSuffix(line, "\n")]++
	}
	return counts
}

// onceEach is what runCounts returns when each of ids ran exactly once.
func onceEach(ids []string) map[string]int {
	m := map[string]int{}
	for _, id := range ids {
		m[id] = 1
	}
	return m
}

// stepTimer logs how long each step of a long test took.
type stepTimer struct {
	t           *testing.T
	begin, last time.Time
}

func newStepTimer(t *testing.T) *stepTimer {
	s := &stepTimer{t: t, begin: time.Now(), last: time.Now()}
	t.Cleanup(func() { t.Logf("%-80s %s", "total (without cleanup)", time.Since(s.begin).Round(time.Millisecond)) })
	return s
}

func (s *stepTimer) step(what string) {
	s.t.Logf("%-80s %s", what, time.Since(s.last).Round(time.Millisecond))
	s.last = time.Now()
}

// buildTemporalPG starts building testdata/temporalpg, which links the
// Temporal server, and returns a channel that yields the binary's path, or
// "" after reporting the failure. The test waits for the build before it
// ends, whatever happens in between.
func buildTemporalPG(t *testing.T) <-chan string {
	out := filepath.Join(t.TempDir(), "temporalpg")
	built := make(chan string, 1)
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		b, err := exec.Command("go", "build", "-o", out, "./testdata/temporalpg").CombinedOutput()
		if err != nil {
			t.Errorf("go build ./testdata/temporalpg: %v\n%s", err, b)
			out = ""
		}
		built <- out
	}()
	return built
}

// procIn returns p reporting to a subtest's t.
func procIn(p *proc, t *testing.T) *proc {
	c := *p
	c.t = t
	return &c
}

// startProgram is start for a program other than toolgate.
func startProgram(t *testing.T, path, ready string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(path, args...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(p.out.String(), ready) {
		select {
		case <-p.exited:
			t.Fatalf("%s %v exited before it was ready:\n%s", filepath.Base(path), args, p.out)
		case <-deadline:
			t.Fatalf("%s %v not ready after 2m:\n%s", filepath.Base(path), args, p.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p
}

// postgres is a private PostgreSQL cluster listening on 127.0.0.1:port,
// with trust authentication for the superuser "postgres".
type postgres struct {
	port int
}

// startPostgres runs initdb into a temporary directory and starts the
// cluster with pg_ctl; it is stopped when the test ends. PostgreSQL refuses
// to run as root, so as root the cluster belongs to the postgres user (the
// Debian package creates it) and the commands run through runuser.
// Durability settings are off: the cluster is thrown away, and the test
// restarts the Temporal server, never PostgreSQL.
func startPostgres(t *testing.T) *postgres {
	t.Helper()
	bin := postgresBinDir(t)
	dir, asPostgres := postgresDir(t)
	run := func(name string, args ...string) *exec.Cmd {
		path := filepath.Join(bin, name)
		if asPostgres {
			args = append([]string{"-u", "postgres", "--", path}, args...)
			path = "runuser"
		}
		cmd := exec.Command(path, args...)
		cmd.Dir = dir
		return cmd
	}
	data := filepath.Join(dir, "data")
	logFile := filepath.Join(dir, "postgres.log")
	if out, err := run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-locale", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	pg := &postgres{port: freePort(t)}
	opts := strings.Join([]string{
		"-p", strconv.Itoa(pg.port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=300", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
	}, " ")
	if out, err := run("pg_ctl", "start", "-D", data, "-w", "-t", "60", "-l", logFile, "-o", opts).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		if out, err := run("pg_ctl", "stop", "-D", data, "-m", "immediate", "-w").CombinedOutput(); err != nil {
			t.Errorf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	return pg
}

// postgresBinDir finds initdb and pg_ctl: the newest
// /usr/lib/postgresql/*/bin (Debian keeps them off PATH), else PATH. A
// machine without them fails the test with the command that installs them.
func postgresBinDir(t *testing.T) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path)
	}
	t.Fatalf("PostgreSQL server binaries (initdb, pg_ctl) are not installed: not in /usr/lib/postgresql/*/bin nor on PATH.\nInstall them with:\n  %s", installPostgres)
	return ""
}

// postgresDir returns an empty directory for the cluster, and whether the
// commands must run as the postgres user (when the test runs as root).
func postgresDir(t *testing.T) (string, bool) {
	if os.Geteuid() != 0 {
		return t.TempDir(), false
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root, PostgreSQL needs the postgres user, which its Debian package creates: %v\nInstall it with:\n  %s", err, installPostgres)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Not t.TempDir(): its parent is private to root, and postgres must
	// reach the directory.
	dir, err := os.MkdirTemp("", "toolgate-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chown(dir, uid, gid))
	return dir, true
}
