{{/* The image both containers run. */}}
{{- define "graft.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* GRAFT_DISCOVERY: the backends switched on, in a fixed order. */}}
{{- define "graft.discovery" -}}
{{- $on := list -}}
{{- range $b := list "char" "files" "nvidia" "render" -}}
{{- if index $.Values.backends $b }}{{ $on = append $on $b }}{{ end -}}
{{- end -}}
{{- required "backends: switch on at least one of char, files, nvidia, render" (join "," $on | default "") -}}
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

{{/* A DeviceClass's extended resource name (values: extendedResourceNames), or nothing:
gpu.graft.dev's only where graft serves GPUs. Call with (list $ "class"). */}}
{{- define "graft.extendedResourceName" -}}
{{- $root := index . 0 -}}
{{- $class := index . 1 -}}
{{- if or (ne $class "gpu.graft.dev") $root.Values.backends.nvidia -}}
{{ index $root.Values.extendedResourceNames $class | default "" }}
{{- end -}}
{{- end }}

{{/* Every extended resource a pod may ask graft's classes by, as a CEL list: each class's
own name, and the name Kubernetes gives every DeviceClass
(deviceclass.resource.kubernetes.io/<class>). */}}
{{- define "graft.extendedResourceNamesCel" -}}
{{- $names := list -}}
{{- range $class := .Values.deviceClasses -}}
{{- with include "graft.extendedResourceName" (list $ $class) -}}
{{- $names = append $names (printf "'%s'" .) -}}
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
Call with (list $ "component"). app.kubernetes.io/name is the DaemonSets' selector (which
cannot change on an upgrade), so it stays what it was: graft, and graft-mps for MPS. */}}
{{- define "graft.labels" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
app.kubernetes.io/name: {{ ternary "graft-mps" "graft" (eq $component "mps") }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Values.image.tag | default $root.Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: {{ $component }}
app.kubernetes.io/part-of: graft
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end }}

{{/* The pods' imagePullSecrets, affinity, annotations: the values of the same names. */}}
{{- define "graft.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Refusals that need no cluster to decide (helm template has none): a class under one of
the names NVIDIA's device plugin hands GPUs out by (nvidia.com/gpu, nvidia.com/mig-...)
needs nvidia.allowDevicePluginCoexistence. */}}
{{- define "graft.guards" -}}
{{- if not .Values.nvidia.allowDevicePluginCoexistence -}}
{{- range $class := .Values.deviceClasses -}}
{{- $name := include "graft.extendedResourceName" (list $ $class) -}}
{{- if hasPrefix "nvidia.com/" $name -}}
{{- fail (printf "extendedResourceNames.%s is %s, a name NVIDIA's device plugin hands out the same GPUs by: set nvidia.allowDevicePluginCoexistence=true once no device plugin runs on graft's GPU nodes (docs/configuration.md), or leave the name empty" $class $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}
