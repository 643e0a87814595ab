// The pod sandbox's process (the "pause" container): it holds a pod's namespaces and exits
// when containerd stops the sandbox. Pods here never share a process namespace, so it has
// no children to reap.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
