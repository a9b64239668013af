package history

// SetCrash makes a stop at step ("object", "manifest", "delete") fail the
// hour as a process killed there would: nothing after it runs.
func (a *Archiver) SetCrash(f func(step string) error) { a.crash = f }
