// Command etcd is etcd's own server entry point (go.etcd.io/etcd/server/v3's
// main.go), built from the module version pinned in go.mod by
// hack/kube-build.sh: the etcd the newest Kubernetes pinned here uses
// (build/dependencies.yaml of k8s.io/kubernetes v1.37.2 says 3.7.0).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
