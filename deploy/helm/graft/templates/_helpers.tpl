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
