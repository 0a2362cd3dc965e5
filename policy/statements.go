package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/statement"
)

// What each message to a call or session says, as a door signs it and the
// workflow checks it (package statement): one function per message, so
// the two can never say it differently. The door adds the run it knows.

// SubmissionStatement is what the submission of call says: its requester
// asks for it, with these arguments, in this session.
func SubmissionStatement(call Call) statement.Statement {
	return statement.Statement{Kind: statement.Submit, Call: call.ID, Session: call.Session, Tool: call.Tool,
		Args: statement.Digest(call.Args), By: call.Requester, ActingUser: call.ActingUser}
}

// DecisionStatement is what a person's decision d of call says; key is
// the call's sticky key, named only by a sticky decision (which the
// session hands on under it).
func DecisionStatement(call Call, d Decision, key string) statement.Statement {
	st := statement.Statement{Kind: statement.Decide, Call: call.ID, Session: call.Session, Tool: call.Tool,
		Args: statement.Digest(call.Args), Decision: d.Kind.String(), Channel: d.Channel, User: d.User}
	if d.Kind == ApprovedWithEdits {
		st.Edited = statement.Digest(d.EditedArgs)
	}
	if d.Kind.Sticky() {
		st.Key = key
	}
	if d.Passkey != nil {
		st.Passkey = d.Passkey.Digest()
	}
	who(&st, d.Approver())
	return st
}

// CancelStatement is what a cancel of call by by says.
func CancelStatement(call Call, by Approver, asRequester bool) statement.Statement {
	st := statement.Statement{Kind: statement.Cancel, Call: call.ID, Session: call.Session, Tool: call.Tool,
		Args: statement.Digest(call.Args), AsRequester: asRequester}
	who(&st, by)
	return st
}

// ClaimStatement is what the requester's claim of call for run says.
func ClaimStatement(call Call, run string) statement.Statement {
	return statement.Statement{Kind: statement.Claim, Call: call.ID, Session: call.Session, Tool: call.Tool,
		Args: statement.Digest(call.Args), Key: run, By: call.Requester}
}

// ReportStatement is what the requester's report of its run of call says
// came of it: the output, or that the tool failed (failed), or that it
// cannot tell (unsure, with what it printed).
func ReportStatement(call Call, output json.RawMessage, failed, unsure string) statement.Statement {
	if t := bytes.TrimSpace(output); len(t) == 0 || string(t) == "null" {
		output = nil // nothing printed, however the message put it
	}
	outcome, err := json.Marshal(struct {
		Output  json.RawMessage `json:"output,omitempty"`
		Error   string          `json:"error,omitempty"`
		Unknown string          `json:"unknown,omitempty"`
	}{output, failed, unsure})
	if err != nil { // output that is not JSON: its bytes, which match only themselves
		outcome = append([]byte(failed+"\x00"+unsure+"\x00"), output...)
	}
	return statement.Statement{Kind: statement.Report, Call: call.ID, Session: call.Session, Tool: call.Tool,
		Args: statement.Digest(call.Args), By: call.Requester, Outcome: statement.Digest(outcome)}
}

// RevokeStatement is what the revoke of session's sticky decision key
// says.
func RevokeStatement(session, key string, by Approver) statement.Statement {
	st := statement.Statement{Kind: statement.Revoke, Session: session, Key: key}
	who(&st, by)
	return st
}

// EndStatement is what ending session says.
func EndStatement(session string, by Approver) statement.Statement {
	st := statement.Statement{Kind: statement.End, Session: session}
	who(&st, by)
	return st
}

// PasskeyStatement is what registering (or removing) the passkey whose
// credential ID is id says: by, through channel, registers it as theirs.
func PasskeyStatement(kind statement.Kind, id string, by Approver, channel string) statement.Statement {
	st := statement.Statement{Kind: kind, Key: id, Channel: channel}
	who(&st, by)
	return st
}

func who(st *statement.Statement, by Approver) {
	st.By, st.Groups = by.Name, by.Groups
	if by.Identity != nil {
		st.Identity = &statement.Identity{Issuer: by.Identity.Issuer, Subject: by.Identity.Subject}
	}
}

// CheckHandedOn checks the statement of a sticky decision d that a
// session hands on under key, or of its end (ended), to a call of session
// other than the one it was taken on: signed by a trusted door, of this
// session and key, and saying who decided what as d says. Its call (which
// must be fromCall, when given), tool, arguments and channel are those of
// the call it was taken on, and its time has passed: a sticky decision
// holds for the session.
func CheckHandedOn(doors *statement.Doors, d Decision, session, key, fromCall string, ended bool) error {
	if ended {
		_, err := doors.Check(d.Statement, EndStatement(session, d.Approver()), time.Time{})
		return err
	}
	st, err := doors.Verify(d.Statement)
	if err != nil {
		return err
	}
	if fromCall != "" && st.Call != fromCall {
		return fmt.Errorf("statement of door %s is of call %s, not of call %s that the sticky decision names", st.Door, st.Call, fromCall)
	}
	want := DecisionStatement(Call{ID: st.Call, Session: session, Tool: st.Tool}, d, key)
	want.Args, want.Channel = st.Args, st.Channel
	_, err = doors.Check(d.Statement, want, time.Time{})
	return err
}
