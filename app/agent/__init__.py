"""One assistant turn as UI-agnostic events: the tool loop (generate → parse → approve → dispatch → observe), the
events every front end renders, and the approvals a turn waits on."""
