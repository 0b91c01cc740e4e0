// Command etcd runs the etcd server at the version Kubernetes' own client pins, so the
// testbed's API server talks to the etcd it was built against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
