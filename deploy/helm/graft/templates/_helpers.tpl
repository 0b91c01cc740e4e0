{{/* The image graft's containers run: repository:tag, and @digest when values give one
(image.digest), which then decides what is pulled whatever the tag points at. */}}
{{- define "graft.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* The ComputeDomain IMEX daemons' image: computeDomains.daemonImage, or graft's. */}}
{{- define "graft.imexImage" -}}
{{ .Values.computeDomains.daemonImage | default (include "graft.image" .) }}
{{- end }}

{{/* The pod securityContext of graft's unprivileged pods (values: podSecurity): graft's own
uid and gid, never root's group nor nobody's ids; fsGroup gives the gid the pod's token
volume (graft.apiToken). No supplemental groups. */}}
{{- define "graft.unprivilegedPodSecurity" -}}
runAsNonRoot: true
runAsUser: {{ int .Values.podSecurity.runAsUser }}
runAsGroup: {{ int .Values.podSecurity.runAsGroup }}
fsGroup: {{ int .Values.podSecurity.runAsGroup }}
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* The container securityContext of every unprivileged graft container. */}}
{{- define "graft.unprivilegedContainerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* The API token of a pod that talks to the API server, mounted where clients look for
it, in place of the one automountServiceAccountToken (off on every graft pod) would give
every container: short-lived (values: apiTokenSeconds), in only the containers that use it
(graft.apiTokenMount). The kubelet writes the token file 0600, owned by the pod's runAsUser
when all its containers share one (else root's), group fsGroup where set (then 0640);
ca.crt and namespace get defaultMode 0440 (288), group fsGroup. No other uid reads it.
Call with $ and add it to the pod's volumes. */}}
{{- define "graft.apiTokenVolume" -}}
- name: api-token
  projected:
    defaultMode: 288
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ int .Values.apiTokenSeconds }}
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
      - downwardAPI:
          items:
            - {path: namespace, fieldRef: {fieldPath: metadata.namespace}}
{{- end }}

{{/* The mount of graft.apiTokenVolume, for a container's volumeMounts. */}}
{{- define "graft.apiTokenMount" -}}
- {name: api-token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
{{- end }}

{{/* GRAFT_DISCOVERY: the backends switched on, in a fixed order; nvidia only on the GPU
DaemonSet. Call with (list $ gpu): empty when nothing is left (the caller decides). */}}
{{- define "graft.discovery" -}}
{{- $root := index . 0 -}}
{{- $gpu := index . 1 -}}
{{- $on := list -}}
{{- range $b := list "char" "files" "nvidia" "render" -}}
{{- if and (index $root.Values.backends $b) (or $gpu (ne $b "nvidia")) }}{{ $on = append $on $b }}{{ end -}}
{{- end -}}
{{- join "," $on -}}
{{- end }}

{{/* The MutatingAdmissionPolicy API version: the value, or v1 where the cluster serves it. */}}
{{- define "graft.mapVersion" -}}
{{- if .Values.requireGraftNri.apiVersion -}}
{{ .Values.requireGraftNri.apiVersion }}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else -}}
admissionregistration.k8s.io/v1beta1
{{- end -}}
{{- end }}

{{/* "true" when MPS tenancy is published as a device taint (values: nvidia.mpsTenantTaint):
MPS on, and the MutatingAdmissionPolicy API there to add each namespace's toleration
(56-mps-tenancy.yaml). */}}
{{- define "graft.mpsTenantTaint" -}}
{{- $api := or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy") .Values.requireGraftNri.apiVersion -}}
{{- if and .Values.backends.nvidia (ne (toString .Values.nvidia.mps) "none") .Values.nvidia.mpsTenantTaint $api -}}
true
{{- else -}}
false
{{- end -}}
{{- end }}

{{/* "true" when claims for several GPUs are rewritten to prefer one NVLink island (values:
nvidia.nvlinkIslandPreference): GPUs served, gpu.graft.dev installed, and the
MutatingAdmissionPolicy API there (57-nvlink-islands.yaml). */}}
{{- define "graft.islandPreference" -}}
{{- $api := or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy") .Values.requireGraftNri.apiVersion -}}
{{- if and .Values.backends.nvidia .Values.nvidia.nvlinkIslandPreference (has "gpu.graft.dev" .Values.deviceClasses) $api -}}
true
{{- else -}}
false
{{- end -}}
{{- end }}

{{/* A DeviceClass's extended resource name (values: extendedResourceNames), or nothing:
gpu.graft.dev's only where graft serves GPUs. Call with (list $ "class"). */}}
{{- define "graft.extendedResourceName" -}}
{{- $root := index . 0 -}}
{{- $class := index . 1 -}}
{{- if or (ne $class "gpu.graft.dev") $root.Values.backends.nvidia -}}
{{ index $root.Values.extendedResourceNames $class | default "" }}
{{- end -}}
{{- end }}

{{/* The MIG profile classes (values: nvidia.migProfiles) as JSON, class name to profile:
only where graft serves GPUs and mig.graft.dev is installed. */}}
{{- define "graft.migProfileClasses" -}}
{{- $out := dict -}}
{{- if and .Values.backends.nvidia (has "mig.graft.dev" .Values.deviceClasses) -}}
{{- range $p := .Values.nvidia.migProfiles -}}
{{- $_ := set $out (printf "mig-%s.graft.dev" $p) $p -}}
{{- end -}}
{{- end -}}
{{ toJson $out }}
{{- end }}

{{/* "true" where the chart installs gpu-shared.graft.dev (time-sliced GPUs under
nvidia.timeSlicing.sharedResourceName): graft serves GPUs, gpu.graft.dev is installed and
the name is set. Otherwise nothing. */}}
{{- define "graft.gpuSharedClass" -}}
{{- if and .Values.backends.nvidia (has "gpu.graft.dev" .Values.deviceClasses) .Values.nvidia.timeSlicing.sharedResourceName -}}
true
{{- end -}}
{{- end }}

{{/* The classes whose requests the MPS tenancy policies handle, as JSON: the values' list,
and with mig.graft.dev in it the MIG profile classes, which select its devices (MPS shares of
static MIG devices among them). */}}
{{- define "graft.mpsTenancyClasses" -}}
{{- $classes := .Values.nvidia.mpsTenancyClasses -}}
{{- if has "mig.graft.dev" $classes -}}
{{- range $class, $p := include "graft.migProfileClasses" . | fromJson -}}
{{- $classes = append $classes $class -}}
{{- end -}}
{{- end -}}
{{ toJson $classes }}
{{- end }}

{{/* Every extended resource a pod may ask graft's classes by, as a CEL list: each class's
own name, and the name Kubernetes gives every DeviceClass
(deviceclass.resource.kubernetes.io/<class>); the shared GPUs' and the MIG profile
classes' too. */}}
{{- define "graft.extendedResourceNamesCel" -}}
{{- $names := list -}}
{{- range $class := .Values.deviceClasses -}}
{{- with include "graft.extendedResourceName" (list $ $class) -}}
{{- $names = append $names (printf "'%s'" .) -}}
{{- end -}}
{{- $names = append $names (printf "'deviceclass.resource.kubernetes.io/%s'" $class) -}}
{{- end -}}
{{- if include "graft.gpuSharedClass" . -}}
{{- $names = append $names (printf "'%s'" .Values.nvidia.timeSlicing.sharedResourceName) -}}
{{- $names = append $names "'deviceclass.resource.kubernetes.io/gpu-shared.graft.dev'" -}}
{{- end -}}
{{- range $class, $p := include "graft.migProfileClasses" . | fromJson -}}
{{- with $.Values.nvidia.migResourcePrefix -}}
{{- $names = append $names (printf "'%s%s'" . $p) -}}
{{- end -}}
{{- $names = append $names (printf "'deviceclass.resource.kubernetes.io/%s'" $class) -}}
{{- end -}}
[{{ join ", " $names }}]
{{- end }}

{{/* The release's object names: fullnameOverride, else the release name (with the chart's
name added when the release name does not hold it), at most 63 characters less the longest
suffix the chart adds ("-resourceslices-own-node"). */}}
{{- define "graft.fullname" -}}
{{- $name := .Values.fullnameOverride -}}
{{- if not $name -}}
{{- $name = ternary .Release.Name (printf "%s-%s" .Release.Name .Chart.Name) (contains .Chart.Name .Release.Name) -}}
{{- end -}}
{{- $name | trunc 39 | trimSuffix "-" -}}
{{- end }}

{{/* The recommended labels (Kubernetes' "Recommended Labels") every object carries.
Call with (list $ "component"). app.kubernetes.io/name is the workloads' selector (which
cannot change on an upgrade), so it stays what it was: graft (graft's DaemonSets),
graft-mps for MPS, graft-compute-domain-controller for the ComputeDomain controller; no two
workloads' pods share a name, so no selector takes another's pods. */}}
{{- define "graft.labels" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $names := dict "mps" "graft-mps" "compute-domain-controller" "graft-compute-domain-controller" "scheduler-extender" "graft-scheduler-extender" -}}
app.kubernetes.io/name: {{ get $names $component | default "graft" }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Values.image.tag | default $root.Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: {{ $component }}
app.kubernetes.io/part-of: graft
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The pods' imagePullSecrets, nodeSelector, affinity and tolerations: the values of the
same names, for pods that may run on any node. */}}
{{- define "graft.podScheduling" -}}
{{- include "graft.podSchedulingFor" (list . "any") -}}
{{- end }}

{{/* As graft.podScheduling for one pool of nodes, called with (list $ pool): "any", "gpu" or
"plain". A node is a GPU node when it carries any one of nvidia.gpuNodeLabels (key: value);
a nodeSelector cannot say "any of", so the pools are node affinity ANDed into every
required term of the affinity value (one empty term without any): "gpu" has a copy of each
term per label with the key In its value (terms are ORed: one label is enough), "plain" one
copy of each term with every label's key NotIn its value (which a node without the key also
satisfies: it has none of them). So every node fits exactly one of the two. */}}
{{- define "graft.podSchedulingFor" -}}
{{- $root := index . 0 -}}
{{- $pool := index . 1 -}}
{{- $v := $root.Values -}}
{{- $gpuLabels := include "graft.gpuNodeLabels" $root | fromJson -}}
{{- $nodeSelector := deepCopy ($v.nodeSelector | default dict) -}}
{{- $affinity := deepCopy ($v.affinity | default dict) -}}
{{- if and (ne $pool "any") $gpuLabels -}}
{{- $na := get $affinity "nodeAffinity" | default dict -}}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := get $req "nodeSelectorTerms" | default (list dict) -}}
{{- $out := list -}}
{{- range $t := $terms -}}
{{- $exprs := get $t "matchExpressions" | default list -}}
{{- if eq $pool "gpu" -}}
{{- range $k := keys $gpuLabels | sortAlpha -}}
{{- $term := deepCopy $t -}}
{{- $_ := set $term "matchExpressions" (append (deepCopy $exprs) (dict "key" $k "operator" "In" "values" (list (get $gpuLabels $k)))) -}}
{{- $out = append $out $term -}}
{{- end -}}
{{- else -}}
{{- $term := deepCopy $t -}}
{{- $all := deepCopy $exprs -}}
{{- range $k := keys $gpuLabels | sortAlpha -}}
{{- $all = append $all (dict "key" $k "operator" "NotIn" "values" (list (get $gpuLabels $k))) -}}
{{- end -}}
{{- $_ := set $term "matchExpressions" $all -}}
{{- $out = append $out $term -}}
{{- end -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $out -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ := set $affinity "nodeAffinity" $na -}}
{{- end -}}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* nvidia.gpuNodeLabels as JSON, without the keys set to null (how a user drops a
default), each value a string. Empty: every node is a GPU node. */}}
{{- define "graft.gpuNodeLabels" -}}
{{- $out := dict -}}
{{- range $k, $val := .Values.nvidia.gpuNodeLabels | default dict -}}
{{- if not (kindIs "invalid" $val) }}{{ $_ := set $out $k (toString $val) }}{{ end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/* Refusals that need no cluster to decide (helm template has none). */}}
{{- define "graft.guards" -}}
{{- if hasKey .Values.nvidia "gpuNodeSelector" -}}
{{- fail "nvidia.gpuNodeSelector is now nvidia.gpuNodeLabels: a node carrying any one of its labels is a GPU node (by default nvidia.com/gpu.present=true or feature.node.kubernetes.io/pci-10de.present=true); move your labels there (docs/configuration.md)" -}}
{{- end -}}
{{- end }}

{{/* The port of a metrics address ("$(POD_IP):9477" -> 9477), or nothing ("off"). */}}
{{- define "graft.metricsPort" -}}
{{- regexFind "[0-9]+$" (regexFind ":[0-9]+$" .) -}}
{{- end }}

{{/* The labels of graft's metrics Service, which the ServiceMonitor selects it by. */}}
{{- define "graft.metricsSelector" -}}
app.kubernetes.io/name: graft
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: metrics
{{- end }}

{{/*
Whether the request or alternative named by the argument (a CEL expression) asks a class of
nvidia.mpsTenancyClasses and tolerates another namespace's MPS tenancy: the key with
another value or Exists, or every taint (56-mps-tenancy.yaml's admission policy).
*/}}
{{- define "graft.mpsForeign" -}}
{{ . }}.deviceClassName in variables.classes &&
{{ . }}.?tolerations.orValue([]).exists(t,
  (t.?key.orValue('') == '' && t.?operator.orValue('Equal') == 'Exists') ||
  (t.?key.orValue('') == variables.key &&
    (t.?operator.orValue('Equal') == 'Exists' ||
     t.?value.orValue('') != object.metadata.namespace)))
{{- end }}
