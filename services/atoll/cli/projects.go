package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/sdk"
)

// projectCmd is `atoll project create|get|list|delete`.
func projectCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "project",
		Short: "Create, show, list and delete projects",
		Long: `A project is the tenant: it owns workloads and quota, and its members hold
roles in it (viewer reads, developer also changes workloads, admin also
manages the project and its members). Platform admins create projects;
where the region allows self-service (the gateway's --self-service-projects),
any signed-in user may create a few, which it owns and administers. A new
project has the region's default quota ('atoll quota -p NAME').`,
		Example: `  atoll project create web --owner alice --display-name "Web team" --label team=web --label cost-center=cc-42
  atoll project list
  atoll project get web
  atoll project delete web`,
	}
	cmd.AddCommand(projectCreateCmd(g), projectGetCmd(g), projectListCmd(g), projectDeleteCmd(g))
	return cmd
}

func projectCreateCmd(g *globals) *cobra.Command {
	var (
		p      computeapi.ProjectCreate
		labels []string
	)
	cmd := &cobra.Command{
		Use:   "create NAME [--owner USER] [--display-name TEXT] [--description TEXT] [--label KEY=VALUE]...",
		Short: "Create a project, its owner as its first admin",
		Long: `create makes a project named NAME: a DNS label of at most 57 characters
(lower-case letters, digits and '-') that is not reserved for the platform
(system, default, platform, public, kube, kube-*, atoll-*, openshift-*).
Its owner (you unless --owner names another user; only platform admins may)
becomes its one admin, who then adds members with 'atoll member add'.`,
		Example: `  atoll project create web --owner alice --label team=web
  atoll project create ml --display-name "ML research" --description "training jobs"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p.Name = args[0]
			var err error
			if p.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
				out, err := c.CreateProject(ctx, p)
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(cmd.OutOrStdout(), g.output, out)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "project %s created, owned by %s\n", out.Name, out.Owner)
				return nil
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Owner, "owner", "", "the user accountable for the project, its first admin (default: you)")
	f.StringVar(&p.DisplayName, "display-name", "", "a name for people")
	f.StringVar(&p.Description, "description", "", "what the project is for")
	f.StringArrayVar(&labels, "label", nil, "a label KEY=VALUE (repeat): team, cost-center, ...")
	return cmd
}

func projectGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   "Show a project: owner, labels and members",
		Example: "  atoll project get web\n  atoll project get web -o yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
				p, err := c.Project(ctx, args[0])
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(cmd.OutOrStdout(), g.output, p)
				}
				describeProject(cmd.OutOrStdout(), *p, time.Now())
				return nil
			})(cmd, args)
		},
	}
}

func projectListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the projects you hold a role in (every project for platform admins)",
		Long: `list shows each project you hold a role in, from your token or as a
member (yourself or one of your groups), with that role; platform admins see
every project. Projects only named by tokens, never created as resources,
show no owner.`,
		Example: "  atoll project list\n  atoll project list -o json",
		Args:    cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
			ps, err := c.Projects(ctx)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, ps)
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "NAME\tROLE\tOWNER\tDISPLAY NAME\tLABELS\tAGE")
			now := time.Now()
			for _, p := range ps {
				owner, created := "-", "-"
				if p.Registered {
					owner, created = p.Owner, age(p.Created, now)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Role, owner, first(p.DisplayName, "-"), labelsLine(p.Labels), created)
			}
			return tw.Flush()
		}),
	}
}

func projectDeleteCmd(g *globals) *cobra.Command {
	var (
		cascade bool
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "delete NAME [--cascade [--wait=false] [--timeout 5m]]",
		Short: "Delete a project (its admins, platform admins)",
		Long: `delete removes a project, its members and its tokens. It is refused while
the project holds any workload (the refusal names them), unless --cascade:
then every workload is stopped and deleted, its quota released, and the
project's Configs, Secrets, tokens and hosts removed with it. The project is
marked deleting at once (nothing new can be created in it) and the region
finishes the deletion, after a restart too; with --wait (the default) the
command returns once the project is gone.`,
		Example: "  atoll project delete web\n  atoll project delete web --cascade",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, _ target) error {
				if !cascade {
					if err := c.DeleteProject(ctx, args[0]); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "project %s deleted\n", args[0])
					return nil
				}
				if err := c.DeleteProjectCascade(ctx, args[0]); err != nil {
					return err
				}
				if !wait {
					fmt.Fprintf(cmd.OutOrStdout(), "project %s deleting\n", args[0])
					return nil
				}
				if err := waitProjectGone(ctx, c, args[0], timeout); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "project %s deleted with everything it held\n", args[0])
				return nil
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&cascade, "cascade", false, "delete everything the project holds with it")
	f.BoolVar(&wait, "wait", true, "with --cascade, wait until the project is gone")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "with --cascade --wait, how long to wait")
	return cmd
}

// waitProjectGone polls until project is not found, for at most timeout.
func waitProjectGone(ctx context.Context, c *sdk.Client, project string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := c.Project(ctx, project)
		if sdk.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("project %s is still deleting after %s", project, timeout)
		case <-tick.C:
		}
	}
}

// describeProject writes a project and its members.
func describeProject(out io.Writer, p computeapi.Project, now time.Time) {
	tw := newTable(out)
	fmt.Fprintf(tw, "Name:\t%s\n", p.Name)
	if p.DisplayName != "" {
		fmt.Fprintf(tw, "Display name:\t%s\n", p.DisplayName)
	}
	if p.Description != "" {
		fmt.Fprintf(tw, "Description:\t%s\n", p.Description)
	}
	fmt.Fprintf(tw, "Owner:\t%s\n", p.Owner)
	fmt.Fprintf(tw, "Labels:\t%s\n", labelsLine(p.Labels))
	fmt.Fprintf(tw, "Your role:\t%s\n", p.Role)
	fmt.Fprintf(tw, "Created:\t%s ago by %s\n", age(p.Created, now), p.CreatedBy)
	_ = tw.Flush()
	fmt.Fprintf(out, "\nMembers:\n")
	printMembers(out, p.Members, "  ")
}

// printMembers writes a table of members.
func printMembers(out io.Writer, ms []computeapi.Member, indent string) {
	tw := newTable(out)
	fmt.Fprintf(tw, "%sKIND\tNAME\tROLE\tADDED BY\n", indent)
	for _, m := range ms {
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", indent, m.Kind, m.Name, m.Role, first(m.AddedBy, "-"))
	}
	_ = tw.Flush()
}

// memberCmd is `atoll member add|remove|list`.
func memberCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Manage a project's members and their roles (the project's admins)",
		Long: `A member is a user (the subject of a token or JWT) or a group (as the
identity provider names it: the tokens file's groups, a JWT's groups claim),
with a role in the project: viewer reads, developer also changes workloads,
admin also manages the project and its members. A change holds at every
gateway within a second. A caller's role is the highest its token names and
its memberships give it. The last admin cannot be removed or demoted.`,
		Example: `  atoll member add bob --role developer -p web
  atoll member add sre --group --role viewer -p web
  atoll member list -p web
  atoll member remove bob -p web`,
	}
	cmd.AddCommand(memberAddCmd(g), memberRemoveCmd(g), memberListCmd(g))
	return cmd
}

func memberKind(group bool) string {
	if group {
		return "group"
	}
	return "user"
}

func memberAddCmd(g *globals) *cobra.Command {
	var (
		role  string
		group bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --role viewer|developer|admin [--group] -p PROJECT",
		Short: "Add a user or group to a project, or change its role",
		Long: `add gives NAME (a user's subject, or with --group a group's name) the role
in the project; a member already there gets the new role.`,
		Example: `  atoll member add bob --role developer -p web
  atoll member add platform-team --group --role admin -p web`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				project, err := t.needProject()
				if err != nil {
					return err
				}
				m, err := c.SetMember(ctx, project, memberKind(group), args[0], role)
				if err != nil {
					return err
				}
				if g.output != "table" {
					return printData(cmd.OutOrStdout(), g.output, m)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s is %s in project %s\n", m.Kind, m.Name, m.Role, project)
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "viewer, developer or admin (required)")
	cmd.Flags().BoolVar(&group, "group", false, "NAME is a group, not a user")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func memberRemoveCmd(g *globals) *cobra.Command {
	var group bool
	cmd := &cobra.Command{
		Use:   "remove NAME [--group] -p PROJECT",
		Short: "Remove a user or group from a project",
		Long: `remove ends NAME's membership; a role its own token names stays. The last
admin cannot be removed: make another member admin first.`,
		Example: "  atoll member remove bob -p web\n  atoll member remove sre --group -p web",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
				project, err := t.needProject()
				if err != nil {
					return err
				}
				if err := c.RemoveMember(ctx, project, memberKind(group), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s removed from project %s\n", memberKind(group), args[0], project)
				return nil
			})(cmd, args)
		},
	}
	cmd.Flags().BoolVar(&group, "group", false, "NAME is a group, not a user")
	return cmd
}

func memberListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list -p PROJECT",
		Short:   "List a project's members and their roles",
		Example: "  atoll member list -p web\n  atoll member list -p web -o json",
		Args:    cobra.NoArgs,
		RunE: g.run(false, func(ctx context.Context, cmd *cobra.Command, c *sdk.Client, t target) error {
			project, err := t.needProject()
			if err != nil {
				return err
			}
			ms, err := c.Members(ctx, project)
			if err != nil {
				return err
			}
			if g.output != "table" {
				return printData(cmd.OutOrStdout(), g.output, ms)
			}
			printMembers(cmd.OutOrStdout(), ms, "")
			return nil
		}),
	}
}
