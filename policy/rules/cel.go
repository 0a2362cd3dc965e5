package rules

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// costLimit bounds the work of one condition on one call (CEL's cost units,
// roughly one per operation), so that arguments with huge lists cannot make
// a comprehension run for long. Exceeding it is a run-time error: the call
// asks a person.
const costLimit = 1_000_000

// celEnv declares what conditions can use: tool, args, session, requester,
// workspace, execution, annotations, the standard library and the strings
// extension.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("session", cel.StringType),
		cel.Variable("requester", cel.StringType),
		cel.Variable("workspace", cel.StringType),
		cel.Variable("execution", cel.StringType),
		cel.Variable("annotations", cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
	)
})

// condition is a compiled `when:` expression.
type condition struct {
	src           string
	prg           cel.Program
	usesWorkspace bool
}

// celProblem is a compile error at a position of the expression.
type celProblem struct {
	line, column int // 1-based in the expression; 0 if unknown
	msg          string
}

// compileCondition type-checks src. Its result must be a bool (or dyn,
// checked at run time).
func compileCondition(src string) (*condition, []celProblem) {
	env, err := celEnv()
	if err != nil {
		return nil, []celProblem{{msg: "CEL environment: " + err.Error()}}
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		var out []celProblem
		for _, e := range iss.Errors() {
			out = append(out, celProblem{line: e.Location.Line(), column: e.Location.Column() + 1, msg: e.Message})
		}
		if len(out) == 0 {
			out = append(out, celProblem{msg: iss.Err().Error()})
		}
		return nil, out
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, []celProblem{{msg: fmt.Sprintf("the condition must be a boolean, but its type is %s", t)}}
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(costLimit))
	if err != nil {
		return nil, []celProblem{{msg: err.Error()}}
	}
	c := &condition{src: src, prg: prg}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name == "workspace" {
			c.usesWorkspace = true
		}
	}
	return c, nil
}

// eval runs the condition. Any failure, even a panic inside CEL, is an
// error, never a match.
func (c *condition) eval(act interpreter.Activation) (ok bool, err error) {
	defer func() {
		if x := recover(); x != nil {
			ok, err = false, fmt.Errorf("condition panicked: %v", x)
		}
	}()
	out, _, err := c.prg.Eval(act)
	if err != nil {
		return false, err
	}
	b, isBool := out.Value().(bool)
	if !isBool {
		return false, fmt.Errorf("condition returned a %s, not a bool", out.Type().TypeName())
	}
	return b, nil
}
