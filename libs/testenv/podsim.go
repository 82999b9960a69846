package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// execResource is KWOK's namespaced Exec: how `exec` runs for one Pod.
var execResource = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}

// podSimResync is how often pods whose Config or Secret was missing are
// tried again.
const podSimResync = 5 * time.Second

// podSim gives each running Pod of a cluster what its kubelet would give
// it for exec: per container, a directory holding the files of its
// ConfigMap and Secret volumes at their mount paths, and the variables of
// its env and envFrom, written as a KWOK Exec named after the Pod (which
// wins over DebugSim's ClusterExec).
type podSim struct {
	c    *Cluster
	dyn  dynamic.Interface
	root string             // <ExecWorkDir>/pods/<cluster>
	done map[types.UID]bool // pods materialized
}

// startPodSims runs a podSim per cluster until ctx ends; wait returns
// when they have stopped.
func (e *Env) startPodSims(ctx context.Context, execWorkDir string) (wait func(), err error) {
	var wg sync.WaitGroup
	for _, c := range e.Clusters {
		dyn, err := dynamic.NewForConfig(c.Config)
		if err != nil {
			return nil, fmt.Errorf("pod simulation %s: %w", c.Name, err)
		}
		s := &podSim{c: c, dyn: dyn, root: filepath.Join(execWorkDir, "pods", c.Name), done: map[types.UID]bool{}}
		f := informers.NewSharedInformerFactory(c.Client, podSimResync)
		inf := f.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { s.sync(ctx, o) },
			UpdateFunc: func(_, o any) { s.sync(ctx, o) },
			DeleteFunc: func(o any) { s.forget(ctx, o) },
		}); err != nil {
			return nil, fmt.Errorf("pod simulation %s: %w", c.Name, err)
		}
		wg.Go(func() { inf.Run(ctx.Done()) })
	}
	return wg.Wait, nil
}

// dir is the directory exec runs in for container name of pod p.
func (s *podSim) dir(p *corev1.Pod, name string) string {
	return filepath.Join(s.root, p.Namespace, p.Name, name)
}

// sync materializes a running pod once; a pod whose Config or Secret is
// missing is tried again at the next resync.
func (s *podSim) sync(ctx context.Context, o any) {
	p, ok := o.(*corev1.Pod)
	if !ok || s.done[p.UID] || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return
	}
	if err := s.materialize(ctx, p); err != nil {
		s.c.env.log.Debug("pod simulation", "cluster", s.c.Name, "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	s.done[p.UID] = true
}

// forget removes a deleted pod's Exec and directories.
func (s *podSim) forget(ctx context.Context, o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	delete(s.done, p.UID)
	err := s.dyn.Resource(execResource).Namespace(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		s.c.env.log.Debug("pod simulation: delete exec", "cluster", s.c.Name, "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	_ = os.RemoveAll(filepath.Join(s.root, p.Namespace, p.Name))
}

// materialize writes the files and the Exec of pod p.
func (s *podSim) materialize(ctx context.Context, p *corev1.Pod) error {
	r := &podSources{ctx: ctx, c: s.c, ns: p.Namespace}
	var execs []any
	for i := range p.Spec.Containers {
		ctr := &p.Spec.Containers[i]
		envs, err := r.env(ctr)
		if err != nil {
			return err
		}
		dir := s.dir(p, ctr.Name)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := r.writeVolumes(p, ctr, dir); err != nil {
			return err
		}
		execs = append(execs, map[string]any{
			"containers": []any{ctr.Name},
			"local":      map[string]any{"workDir": dir, "envs": envs},
		})
	}
	ex := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Exec",
		"metadata":   map[string]any{"name": p.Name, "namespace": p.Namespace},
		"spec":       map[string]any{"execs": execs},
	}}
	_, err := s.dyn.Resource(execResource).Namespace(p.Namespace).Apply(ctx, p.Name, ex, metav1.ApplyOptions{FieldManager: "atoll-testenv", Force: true})
	if err != nil {
		return fmt.Errorf("apply exec: %w", err)
	}
	return nil
}

// podSources resolves a pod's ConfigMaps and Secrets in its namespace,
// each read once.
type podSources struct {
	ctx     context.Context
	c       *Cluster
	ns      string
	cms     map[string]map[string]string
	secrets map[string]map[string]string
}

// data is the data of ConfigMap (secret false) or Secret name; nil
// without error when it is missing and optional.
func (r *podSources) data(secret bool, name string, optional *bool) (map[string]string, error) {
	m := &r.cms
	if secret {
		m = &r.secrets
	}
	if *m == nil {
		*m = map[string]map[string]string{}
	}
	if d, ok := (*m)[name]; ok {
		return d, nil
	}
	var d map[string]string
	var err error
	if secret {
		var s *corev1.Secret
		if s, err = r.c.Client.CoreV1().Secrets(r.ns).Get(r.ctx, name, metav1.GetOptions{}); err == nil {
			d = map[string]string{}
			for k, v := range s.Data {
				d[k] = string(v)
			}
		}
	} else {
		var cm *corev1.ConfigMap
		if cm, err = r.c.Client.CoreV1().ConfigMaps(r.ns).Get(r.ctx, name, metav1.GetOptions{}); err == nil {
			d = cm.Data
		}
	}
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", r.ns, name, err)
	}
	(*m)[name] = d
	return d, nil
}

// env is a container's variables as KWOK EnvVars: envFrom first (with
// its prefix), then env, a later one replacing an earlier one.
func (r *podSources) env(ctr *corev1.Container) ([]any, error) {
	var names []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			names = append(names, k)
		}
		vals[k] = v
	}
	for _, ef := range ctr.EnvFrom {
		var d map[string]string
		var err error
		switch {
		case ef.ConfigMapRef != nil:
			d, err = r.data(false, ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional)
		case ef.SecretRef != nil:
			d, err = r.data(true, ef.SecretRef.Name, ef.SecretRef.Optional)
		}
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			set(ef.Prefix+k, d[k])
		}
	}
	for _, e := range ctr.Env {
		var d map[string]string
		var key string
		var err error
		switch f := e.ValueFrom; {
		case f == nil:
			set(e.Name, e.Value)
			continue
		case f.ConfigMapKeyRef != nil:
			key = f.ConfigMapKeyRef.Key
			d, err = r.data(false, f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Optional)
		case f.SecretKeyRef != nil:
			key = f.SecretKeyRef.Key
			d, err = r.data(true, f.SecretKeyRef.Name, f.SecretKeyRef.Optional)
		default:
			continue // field and resource references are not simulated
		}
		if err != nil {
			return nil, err
		}
		if v, ok := d[key]; ok {
			set(e.Name, v)
		}
	}
	out := make([]any, 0, len(names))
	for _, k := range names {
		out = append(out, map[string]any{"name": k, "value": vals[k]})
	}
	return out, nil
}

// writeVolumes writes, under dir, the keys of each ConfigMap and Secret
// volume container ctr mounts, at mountPath/path with their mode (the
// item's, else the volume's default, else 0644).
func (r *podSources) writeVolumes(p *corev1.Pod, ctr *corev1.Container, dir string) error {
	for _, m := range ctr.VolumeMounts {
		i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || m.SubPath != "" {
			continue
		}
		v := p.Spec.Volumes[i]
		var d map[string]string
		var items []corev1.KeyToPath
		var mode *int32
		var err error
		switch {
		case v.ConfigMap != nil:
			d, err = r.data(false, v.ConfigMap.Name, v.ConfigMap.Optional)
			items, mode = v.ConfigMap.Items, v.ConfigMap.DefaultMode
		case v.Secret != nil:
			d, err = r.data(true, v.Secret.SecretName, v.Secret.Optional)
			items, mode = v.Secret.Items, v.Secret.DefaultMode
		default:
			continue
		}
		if err != nil {
			return err
		}
		if len(items) == 0 {
			for k := range d {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		base := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(m.MountPath, "/")))
		for _, it := range items {
			val, ok := d[it.Key]
			if !ok {
				continue
			}
			perm := os.FileMode(0o644)
			if mode != nil {
				perm = os.FileMode(*mode) & os.ModePerm
			}
			if it.Mode != nil {
				perm = os.FileMode(*it.Mode) & os.ModePerm
			}
			f := filepath.Join(base, filepath.FromSlash(it.Path))
			if !strings.HasPrefix(f, dir+string(filepath.Separator)) {
				return fmt.Errorf("volume %s: path %q leaves the container's directory", m.Name, it.Path)
			}
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(f, []byte(val), perm); err != nil {
				return err
			}
			if err := os.Chmod(f, perm); err != nil { // WriteFile's mode is masked by the umask
				return err
			}
		}
	}
	return nil
}
