package sqldb

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenSQLiteCreatesTheFileAndTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new", "t.db")
	db, err := Open(context.Background(), "sqlite:"+path, Options{
		Synchronous: "FULL",
		Schema:      "CREATE TABLE IF NOT EXISTS t (k BLOB PRIMARY KEY, v TEXT);\nCREATE INDEX IF NOT EXISTS t_v ON t (v);\n",
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	assert.FileExists(t, path)
	assert.False(t, db.Postgres())
	assert.Equal(t, path, db.Where())
	_, err = db.Exec(db.Q("INSERT INTO t (k, v) VALUES (?, ?)"), []byte{1}, "one")
	require.NoError(t, err)
	var v string
	require.NoError(t, db.QueryRow(db.Q("SELECT v FROM t WHERE k = ?"), []byte{1}).Scan(&v))
	assert.Equal(t, "one", v)
	var sync int
	require.NoError(t, db.QueryRow("PRAGMA synchronous").Scan(&sync))
	assert.Equal(t, 2, sync, "synchronous(FULL)")
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	_, err := Open(ctx, "sqlite:", Options{})
	assert.ErrorIs(t, err, ErrNoDatabase)

	path := filepath.Join(t.TempDir(), "t.db")
	_, err = Open(ctx, path, Options{Schema: "CREATE TABLE t (k TEXT); CREATE TABLE t (k TEXT)"})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.True(t, e.Schema)
	assert.Equal(t, path, e.Where)
}

func TestQ(t *testing.T) {
	q := "SELECT a FROM t WHERE b = ? AND c IN (?, ?)"
	assert.Equal(t, q, (&DB{}).Q(q), "SQLite reads ?")
	assert.Equal(t, "SELECT a FROM t WHERE b = $1 AND c IN ($2, $3)", (&DB{postgres: true}).Q(q))
}

func TestWhereRedactsThePassword(t *testing.T) {
	// sql.Open does not connect: no server is needed to open a pool.
	db, err := Open(context.Background(), "postgres://toolgate:s3cret@db.example:5432/toolgate?sslmode=disable", Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	assert.True(t, db.Postgres())
	assert.Equal(t, "postgres://toolgate:xxxxx@db.example:5432/toolgate?sslmode=disable", db.Where())
	assert.NotContains(t, db.Where(), "s3cret")
}
