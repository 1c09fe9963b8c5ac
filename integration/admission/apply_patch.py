#!/usr/bin/python3
"""Independent check of wisp's admission answers (python3-jsonpatch, not wisp's code).

stdin: {"object": <the object sent>, "review": <the AdmissionReview wisp answered>}
stdout: the object after applying response.patch with jsonpatch (unchanged when there is none).
Exit 1 with a message when the response is malformed or the patch does not apply.
"""
import base64
import json
import sys

import jsonpatch


def main():
    data = json.load(sys.stdin)
    response = data["review"]["response"]
    obj = data["object"]
    if "patch" in response:
        if response.get("patchType") != "JSONPatch":
            sys.exit("patchType is %r, not JSONPatch" % response.get("patchType"))
        ops = json.loads(base64.b64decode(response["patch"]))
        try:
            obj = jsonpatch.JsonPatch(ops).apply(obj)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            sys.exit("patch does not apply: %s" % e)
    json.dump(obj, sys.stdout)


if __name__ == "__main__":
    main()
